// Package e2e runs the built binaries (bin/pbx, bin/pbxctl) end to end on loopback,
// driven by SIPp as phones and carriers, and checks the results through the files
// the PBX writes and the API it serves. The binaries come from $PBX_BIN (make test
// sets it) or are built into a temporary directory.
package e2e
