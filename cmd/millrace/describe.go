package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/protocol"
)

// runDescribe is `millrace describe DIR|LINE [-o FILE] [--group GROUP]`: the canonical
// descriptor.json of the streamlet an action config line declares, exactly as the bridge's
// discovery answers it. For a line with --state it also says, on stderr (stdout stays the
// descriptor's, for `> descriptor.json`), which changelog topics to create and bind.
func runDescribe(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "describe", "DIR|LINE [-o FILE] [--group GROUP]")
	out := fs.String("o", "", "write descriptor.json to FILE instead of stdout")
	group := fs.String("group", "", "the streamlet's consumer `GROUP` (the sidecar's FLOW_CONSUMER_GROUP, by default PIPELINE.STREAMLET), which names the changelog topics of a line with --state")
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
	// Refused before anything is written, so that -o leaves no file behind.
	if *group != "" && len(a.State) == 0 {
		return fs.usageErr("--group names the changelog topics of a line with --state, and this one keeps no state: leave it out")
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
	} else if _, err := e.stdout.Write(append(data, '\n')); err != nil {
		// Text on stdout ends with a newline; -o writes the canonical bytes exactly (a trailing
		// newline is whitespace to every JSON reader, the sidecar's included).
		return err
	}
	if g := *group; len(a.State) > 0 {
		if g == "" {
			g = "PIPELINE." + a.Name
		}
		_, err = io.WriteString(e.stderr, changelogNote(a, g, *group == ""))
	}
	return err
}

// changelogNote tells the deployer of a stateful line which changelog topics to create, how,
// and the sidecar variable binding each (docs/state.md, "The changelog topic").
func changelogNote(a *actiondir.Action, group string, placeholder bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "millrace describe: %s keeps state per key (--state): before it is deployed, create a changelog topic for each stateful inlet, with exactly the partitions of the topic the inlet reads and cleanup.policy=compact, and bind it in the sidecar:\n", a.Name)
	for _, c := range a.Changelogs(group) {
		fmt.Fprintf(&b, "  inlet %s: topic %s (partitions: as the inlet's topic; config cleanup.policy=compact)\n", c.Inlet, c.Topic)
		fmt.Fprintf(&b, "    kafka-topics.sh --bootstrap-server BROKERS --create --topic %s --partitions N --config cleanup.policy=compact\n", c.Topic)
		fmt.Fprintf(&b, "    %s=%s\n", c.Var, c.Topic)
	}
	if placeholder {
		fmt.Fprintf(&b, "  (PIPELINE.%s is the sidecar's consumer group, FLOW_CONSUMER_GROUP: give --group GROUP to name the topics after it; N is the inlet topic's partition count)\n", a.Name)
	} else {
		b.WriteString("  (N is the inlet topic's partition count)\n")
	}
	b.WriteString("  The sidecar's principal needs Read, Write, Describe and DescribeConfigs on each changelog; the sidecar checks all of this at start.\n")
	return b.String()
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
