// Package prompts owns the voicemail prompt set (DESIGN 5.7): a standard
// English set embedded in the binary as 8 kHz mono 16-bit WAV files, which
// voicemail.promptsDir overrides file by file, and the offline generator
// behind `pbxctl prompts generate` that rebuilds the set from text with a
// local espeak-ng or an OpenAI-compatible speech endpoint.
//
// The embedded set is rebuilt with `make prompts` (or `go generate
// ./appliance/prompts`); the running PBX never calls a synthesiser.
package prompts

//go:generate go run ../../cmd/pbxctl prompts generate --engine espeak --out en
