package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"pbx/appliance/config"
	"pbx/appliance/prompts"
)

func newPromptsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prompts",
		Short: "Generate the voicemail prompt set",
	}
	cmd.AddCommand(newPromptsGenerateCmd())
	return cmd
}

func newPromptsGenerateCmd() *cobra.Command {
	var out, lang, engine, endpoint string
	cmd := &cobra.Command{
		Use:   "generate --out DIR",
		Short: "Synthesise every prompt as an 8 kHz mono WAV file",
		Long: `generate writes every prompt of the standard set as <name>.wav (8 kHz mono 16-bit
PCM) into --out, ready for voicemail.promptsDir or to rebuild the embedded set.

--engine ttsprovider (the default) speaks through an OpenAI-compatible speech endpoint
(--endpoint, required; POST {endpoint}/v1/audio/speech) with the configuration's tts
block: its key (PBX_TTS_API_KEY, then apiKeyFile, then apiKey), voice and model.
--engine espeak runs the local espeak-ng, fully offline. The running PBX never calls a
synthesiser. Progress is shown on a terminal and nothing is printed when piped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageError{errors.New("--out is required")}
			}
			if lang != "en" {
				return usageError{fmt.Errorf("language %q: only en has a prompt text set", lang)}
			}
			var synth prompts.Synth
			switch engine {
			case "espeak":
				synth = prompts.Espeak{Voice: "en-us"}
			case "ttsprovider":
				if endpoint == "" {
					return usageError{errors.New("--engine ttsprovider needs --endpoint URL (no vendor is assumed)")}
				}
				p, err := providerFromConfig(cmd)
				if err != nil {
					return err
				}
				p.Endpoint = endpoint
				synth = p
			default:
				return usageError{fmt.Errorf("engine %q: espeak or ttsprovider", engine)}
			}
			w := cmd.OutOrStdout()
			progress := func(done, total int, name string) {
				fmt.Fprintf(w, "\r\033[K[%d/%d] %s", done, total, name)
			}
			if !isTerminal(w) {
				progress = nil
			}
			err := prompts.Generate(cmd.Context(), synth, out, progress)
			if progress != nil {
				fmt.Fprintln(w)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "directory to write the <name>.wav files into")
	f.StringVar(&lang, "lang", "en", "language of the prompt texts")
	f.StringVar(&engine, "engine", "ttsprovider", "espeak (local espeak-ng) or ttsprovider (speech endpoint)")
	f.StringVar(&endpoint, "endpoint", "", "base URL of the OpenAI-compatible speech endpoint")
	f.StringP("config", "c", "", "configuration directory for the tts block (default $PBX_CONFIG or /etc/pbx)")
	return cmd
}

// providerFromConfig reads the tts block; without a configuration
// directory only PBX_TTS_API_KEY supplies the key.
func providerFromConfig(cmd *cobra.Command) (prompts.Provider, error) {
	p := prompts.Provider{Key: os.Getenv(config.EnvTTSAPIKey)}
	dir, err := configDir(cmd, nil)
	if err != nil {
		return p, err
	}
	if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
		if flag, _ := cmd.Flags().GetString("config"); flag != "" {
			return p, usageError{fmt.Errorf("configuration directory %s: not a directory", dir)}
		}
		return p, nil
	}
	cfg, err := loadOrReport(cmd, nil)
	if err != nil {
		return p, err
	}
	if t := cfg.System.TTS; t != nil {
		p.Key, p.Model, p.Voice = string(t.Key), t.Model, t.Voice
	}
	return p, nil
}

// isTerminal says whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
