package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// What a failed duplicate check prints, so that a rare failure (one CI run in many) explains
// itself from its output alone: where the copies are, whether the inlet itself holds copies
// (its producer wrote a batch twice: not the pipeline's doing), and what the group did.

// dupSpan is the records of one inlet partition found the same number of times on the outlets.
type dupSpan struct {
	partition int32
	copies    int
	n         int
	from, to  int64 // their first and last inlet offsets
}

// dupSpans sums the duplicated inputs by inlet partition and number of copies.
func dupSpans(ps []produced, copies func(id string) int) []dupSpan {
	type key struct {
		p int32
		c int
	}
	by := map[key]*dupSpan{}
	for _, p := range ps {
		c := copies(p.id)
		if c < 2 {
			continue
		}
		s := by[key{p.partition, c}]
		if s == nil {
			s = &dupSpan{partition: p.partition, copies: c, from: p.offset, to: p.offset}
			by[key{p.partition, c}] = s
		}
		s.n++
		s.from, s.to = min(s.from, p.offset), max(s.to, p.offset)
	}
	var out []dupSpan
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b dupSpan) int {
		if a.partition != b.partition {
			return int(a.partition - b.partition)
		}
		return a.copies - b.copies
	})
	return out
}

func formatSpans(spans []dupSpan) string {
	var parts []string
	for _, s := range spans {
		parts = append(parts, fmt.Sprintf("partition %d: %d ×%d (offsets %d–%d)", s.partition, s.n, s.copies, s.from, s.to))
	}
	return strings.Join(parts, "; ")
}

// inletCopies compares each inlet partition's end offset with what was produced to it: a
// partition holding more records than its producer was acknowledged for holds copies the
// producer wrote (a retried batch written twice), which the pipeline then delivers faithfully.
func (pl *pipeline) inletCopies() string {
	end, err := pl.b.EndOffsets(context.Background(), pl.inTopic)
	if err != nil {
		return fmt.Sprintf("the inlet's end offsets: %v", err)
	}
	count := map[int32]int64{}
	pl.mu.Lock()
	for _, p := range pl.produced {
		count[p.partition]++
	}
	pl.mu.Unlock()
	var extra []string
	for p, e := range end {
		if e > count[p] {
			extra = append(extra, fmt.Sprintf("partition %d holds %d records, %d were produced", p, e, count[p]))
		}
	}
	if len(extra) == 0 {
		return "the inlet holds exactly the records produced"
	}
	slices.Sort(extra)
	return "the inlet holds more than was produced: " + strings.Join(extra, "; ")
}

// groupEvents returns the lines of every sidecar log of the case that say what the group and
// the conversations did (assignments, revocations, failures, warnings), in time order, each
// named by its log and cut to 300 bytes (the inlet topic's name shortened to IN); at most max
// lines, the last ones.
func (pl *pipeline) groupEvents(max int) string {
	logs, _ := filepath.Glob(filepath.Join(pl.dir, "sidecar-*.log"))
	type line struct {
		at   time.Time
		text string
	}
	short := strings.NewReplacer(`"pipeline":"e2e",`, "", `"streamlet":"`+pl.a.name+`",`, "", pl.inTopic, "IN")
	var lines []line
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			l := sc.Text()
			if !groupEvent(l) {
				continue
			}
			var at time.Time
			if _, rest, ok := strings.Cut(l, `"time":"`); ok {
				if ts, _, ok := strings.Cut(rest, `"`); ok {
					at, _ = time.Parse(time.RFC3339Nano, ts)
				}
			}
			l = short.Replace(l)
			if len(l) > 300 {
				l = l[:300] + "…"
			}
			lines = append(lines, line{at, filepath.Base(path) + " " + l})
		}
		f.Close()
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	lines = lines[len(lines)-min(len(lines), max):]
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.text
	}
	return strings.Join(out, "\n")
}

// groupEvent reports whether a sidecar log line is one groupEvents keeps.
func groupEvent(l string) bool {
	if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
		return true
	}
	for _, msg := range []string{"partition assigned", "partition revoked", "conversation started", "transaction was aborted", "a rebalance took"} {
		if strings.Contains(l, msg) {
			return true
		}
	}
	return false
}
