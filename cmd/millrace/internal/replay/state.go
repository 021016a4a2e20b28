package replay

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
)

// changelogs returns the changelog topics the cluster holds for a streamlet: compacted topics
// named PREFIX.PORT.state for one of prefixes (its consumer group, the name `millrace
// describe` suggests; its streamlet, the name `millrace run` gives). A deployment may name its
// changelogs otherwise (FLOW_INLET_<PORT>_STATE_TOPIC is free): those are not seen here. A
// candidate whose config cannot be read (no DescribeConfigs) counts as a changelog: a refusal
// too many is safer than a rewind that silently keeps state.
func changelogs(ctx context.Context, adm *kadm.Client, prefixes []string) ([]string, error) {
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the topics, to find the streamlet's changelogs: %w", err)
	}
	var candidates []string
	for _, name := range listed.Names() {
		for _, p := range prefixes {
			if rest, ok := strings.CutPrefix(name, p+"."); ok && len(rest) > len(".state") && strings.HasSuffix(rest, ".state") {
				candidates = append(candidates, name)
				break
			}
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	configs, err := adm.DescribeTopicConfigs(ctx, candidates...)
	if err != nil {
		return candidates, nil // unreadable configs count as changelogs (above)
	}
	var out []string
	for _, rc := range configs {
		compacted := rc.Err != nil
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
				compacted = true
			}
		}
		if compacted {
			out = append(out, rc.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
