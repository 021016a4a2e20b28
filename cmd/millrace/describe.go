package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/ankka-flow/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/protocol"
)

// runDescribe is `millrace describe DIR|LINE [-o FILE]`: the canonical descriptor.json of the
// streamlet an action config line declares, exactly as the bridge's discovery answers it.
func runDescribe(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "describe", "DIR|LINE [-o FILE]")
	out := fs.String("o", "", "write descriptor.json to FILE instead of stdout")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fs.usageErr(fmt.Sprintf("expected one action directory, config file or config line (quoted), got %d arguments", len(pos)))
	}
	if st, err := os.Stat(pos[0]); err == nil && !st.IsDir() && actiondir.IsPipelineFile(pos[0]) {
		return describePipelineErr(pos[0])
	}
	a, err := actiondir.Load(pos[0])
	if err != nil {
		return err
	}
	if problems := protocol.Validate(a.Spec(Version())); len(problems) > 0 {
		return fmt.Errorf("%s declares a streamlet that is not valid:\n%v", a.Source, problems)
	}
	data, err := protocol.MarshalDescriptor(a.Spec(Version()))
	if err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, data, 0o644); err != nil {
			return fmt.Errorf("writing the descriptor: %w", err)
		}
		return nil
	}
	// Text on stdout ends with a newline; -o writes the canonical bytes exactly (a trailing
	// newline is whitespace to every JSON reader, the sidecar's included).
	_, err = e.stdout.Write(append(data, '\n'))
	return err
}

// describePipelineErr is the answer to `describe PIPELINE-FILE`: describe takes one action,
// and says how to describe each streamlet of the pipeline.
func describePipelineErr(file string) error {
	msg := fmt.Sprintf("%s is a pipeline file; describe takes one action (a directory, config file or quoted config line)", file)
	p, err := actiondir.LoadPipeline(file)
	if err != nil {
		return fmt.Errorf("%s: describe each streamlet's action directory on its own", msg)
	}
	var cmds []string
	for _, s := range p.Streamlets {
		cmds = append(cmds, "millrace describe "+s.Action.Source)
	}
	return fmt.Errorf("%s: describe each streamlet on its own: %s", msg, strings.Join(cmds, "; "))
}
