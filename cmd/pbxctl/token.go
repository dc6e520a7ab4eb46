package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Work with API tokens",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "hash",
		Short: "Read a token on standard input and print its sha256: form for api.tokens[].hash",
		Long: `hash reads one token from standard input (a trailing newline is ignored) and prints
sha256:<64 hex characters>, the form api.tokens[].hash takes, so the plaintext never has to
be stored in the configuration.`,
		Example: `  head -c 32 /dev/urandom | base64 | tr -d '=+/' | tee token.txt | pbxctl token hash`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && line == "" {
				return usageError{fmt.Errorf("no token on standard input")}
			}
			tok := strings.TrimRight(line, "\r\n")
			if tok == "" {
				return usageError{fmt.Errorf("the token is empty")}
			}
			if len(tok) < 32 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the token has %d characters; use at least 32 random characters\n", len(tok))
			}
			sum := sha256.Sum256([]byte(tok))
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "sha256:%s\n", hex.EncodeToString(sum[:]))
			return err
		},
	})
	return cmd
}
