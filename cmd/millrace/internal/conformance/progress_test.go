package conformance_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// progressRun runs the kit on behaviour b with a progress writer and returns the report and
// the lines written to it.
func progressRun(t *testing.T, b string, tune func(*conformance.Action, *conformance.Options)) (*conformance.Report, []string) {
	t.Helper()
	a := testAction(t, b)
	var progress testkit.SyncBuffer
	opts := conformance.Options{Inputs: testInputs(&a), Progress: &progress}
	if tune != nil {
		tune(&a, &opts)
	}
	rep, err := conformance.Run(context.Background(), a, opts)
	if err != nil {
		t.Fatalf("Run(%s) = %v", b, err)
	}
	return rep, strings.Split(strings.TrimSuffix(progress.String(), "\n"), "\n")
}

// TestProgressStreams: each check's line goes to the progress writer once, as the check
// completes: the conversations' checks in the order they run, the checks that watch every
// conversation (framing, stdout, …) only at the end, so the order is not the report's.
func TestProgressStreams(t *testing.T) {
	rep, lines := progressRun(t, "good", nil)
	var got []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "PASS ") && !strings.HasPrefix(l, "FAIL ") {
			t.Fatalf("progress line %q is no check's line", l)
		}
		got = append(got, strings.SplitN(strings.SplitN(l, " ", 2)[1], ":", 2)[0])
	}
	want := []string{
		conformance.CheckAnswers, conformance.CheckUnknownKeys, conformance.CheckConfig, conformance.CheckNonASCII,
		conformance.CheckLarge, conformance.CheckBurst, conformance.CheckBatch, conformance.CheckConcurrent, conformance.CheckCancel, conformance.CheckState, conformance.CheckReady, conformance.CheckFraming,
		conformance.CheckStdout, conformance.CheckOutputs, conformance.CheckSilence, conformance.CheckStderr, conformance.CheckShutdown,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("progress wrote the checks in the order %q; want %q", got, want)
	}
	if !rep.Conformant {
		t.Fatalf("Run(good) is not conformant:\n%s", strings.Join(lines, "\n"))
	}
}

// TestAnswerWait: the usual defects are judged within the kit's bounded wait, not the action's
// item timeout, and a silent action is told what the kit waits for. The bounds are asserted as
// the kit reports them, never by the wall clock.
func TestAnswerWait(t *testing.T) {
	tests := []struct {
		behaviour string
		tune      func(*conformance.Action, *conformance.Options)
		check     string
		detail    []string // in the check's first failure
		note      string   // how a progress line before it begins ("*": a conversation's name)
	}{
		{
			// long enough for the items before it to be answered on a loaded machine
			"skip-answer", func(a *conformance.Action, o *conformance.Options) { o.AnswerWait = 3 * time.Second },
			conformance.CheckAnswers,
			[]string{"no answer to delivery dl-answers-2 (item from fixtures/0/1) within 3s (the conformance wait; the item timeout is 30s: give a slow action more with --timeout)", "flush stdout", "mawk: -W interactive"},
			"  … waiting for an answer to delivery dl-answers-2 (item from fixtures/0/1) (",
		},
		{
			"mute", func(a *conformance.Action, o *conformance.Options) {
				a.ReadyTimeout, o.AnswerWait = 300*time.Millisecond, time.Second
			},
			conformance.CheckReady,
			[]string{"no ready within 1.3s of hello (the ready timeout is 300ms)", "flush stdout after each line", "read stdin line by line as it comes, not in blocks (mawk: -W interactive"},
			"  … waiting for ready from the main conversation (hello sent ",
		},
		{
			"ignore-shutdown", func(a *conformance.Action, o *conformance.Options) { a.ShutdownGrace = time.Second },
			conformance.CheckShutdown,
			[]string{"still running 1s after shutdown (the "}, // whichever conversation is first
			// noteOnce: whichever conversation waits first says so, as the conversations end
			// their checks in the order the machine lets them
			"  … waiting for the * conversation to exit after shutdown (",
		},
	}
	for _, tt := range tests {
		t.Run(tt.behaviour, func(t *testing.T) {
			t.Parallel()
			_, lines := progressRun(t, tt.behaviour, tt.tune)
			fail := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "FAIL "+tt.check+": ") })
			if fail < 0 {
				t.Fatalf("no FAIL %s line in the progress:\n%s", tt.check, strings.Join(lines, "\n"))
			}
			for _, d := range tt.detail {
				if !strings.Contains(lines[fail], d) {
					t.Errorf("the %s failure = %q; want it to say %q", tt.check, lines[fail], d)
				}
			}
			if note := slices.IndexFunc(lines, func(l string) bool { return matchNote(l, tt.note) }); note < 0 || note > fail {
				t.Errorf("progress has no %q before its failure:\n%s", tt.note, strings.Join(lines, "\n"))
			}
		})
	}
}

// matchNote reports whether line begins as note does, where a "*" in note stands for one
// word: a conversation's name ("main", "config", …).
func matchNote(line, note string) bool {
	before, after, wild := strings.Cut(note, "*")
	if !wild {
		return strings.HasPrefix(line, note)
	}
	rest, ok := strings.CutPrefix(line, before)
	if !ok {
		return false
	}
	name, _, ok := strings.Cut(rest, after)
	return ok && name != "" && !strings.Contains(name, " ")
}
