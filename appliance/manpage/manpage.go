// Package manpage writes roff manual pages for a cobra command tree, one page per
// visible command, so packages can ship man pages generated from the same tree the
// binaries run.
package manpage

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// WriteTree writes <dir>/<command-path-with-dashes>.1 for root and every visible
// subcommand. date stamps the pages (use a fixed date for reproducible packages).
func WriteTree(root *cobra.Command, dir, version string, date time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		if c.Hidden || (!c.IsAvailableCommand() && c != root) {
			return nil
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-")
		f, err := os.Create(filepath.Join(dir, name+".1"))
		if err != nil {
			return err
		}
		err = Write(f, c, version, date)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write man page %s: %w", name, err)
		}
		for _, sub := range c.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(root)
}

// Write renders one command's page.
func Write(w io.Writer, c *cobra.Command, version string, date time.Time) error {
	name := strings.ReplaceAll(c.CommandPath(), " ", "-")
	var b strings.Builder
	fmt.Fprintf(&b, ".TH %s 1 %q %q %q\n", strings.ToUpper(name), date.Format("2006-01-02"), c.Root().Name()+" "+version, "PBX Manual")
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", name, esc(c.Short))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n.B %s\n", esc(c.UseLine()))
	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s\n", paragraphs(desc))
	if c.Example != "" {
		fmt.Fprintf(&b, ".SH EXAMPLES\n.nf\n%s\n.fi\n", esc(c.Example))
	}
	flags := func(title string, fs *pflag.FlagSet) {
		if !fs.HasAvailableFlags() {
			return
		}
		fmt.Fprintf(&b, ".SH %s\n", title)
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			head := "\\fB--" + f.Name + "\\fR"
			if f.Shorthand != "" {
				head = "\\fB-" + f.Shorthand + "\\fR, " + head
			}
			if f.Value.Type() != "bool" {
				head += " \\fI" + f.Value.Type() + "\\fR"
			}
			fmt.Fprintf(&b, ".TP\n%s\n%s", head, esc(f.Usage))
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" {
				fmt.Fprintf(&b, " (default %s)", esc(f.DefValue))
			}
			b.WriteString("\n")
		})
	}
	flags("OPTIONS", c.NonInheritedFlags())
	flags("OPTIONS INHERITED FROM PARENT COMMANDS", c.InheritedFlags())
	var see []string
	if c.HasParent() {
		see = append(see, strings.ReplaceAll(c.Parent().CommandPath(), " ", "-")+"(1)")
	}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && !sub.Hidden {
			see = append(see, strings.ReplaceAll(sub.CommandPath(), " ", "-")+"(1)")
		}
	}
	if len(see) > 0 {
		fmt.Fprintf(&b, ".SH SEE ALSO\n%s\n", strings.Join(see, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string {
	s = strings.ReplaceAll(s, "\\", "\\e")
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			line = "\\&" + line
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

func paragraphs(s string) string {
	return strings.ReplaceAll(esc(strings.TrimSpace(s)), "\n\n", "\n.PP\n")
}

// Command is the hidden "man DIR" command both binaries carry, so packages can
// generate their pages from the same command tree the binaries run.
func Command(version string) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write manual pages for this program and its commands into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return WriteTree(cmd.Root(), args[0], version, time.Now().UTC())
		},
	}
}
