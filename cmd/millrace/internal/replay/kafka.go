// Package replay is `millrace replay`: it rewinds a streamlet's consumer group to a time or
// to offsets, and re-drives records from a dead-letter topic back to the topics they came
// from. Both talk to Kafka with franz-go's admin client (kadm); neither needs the streamlet
// running (a rewind needs it stopped).
package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
)

// Sentinel errors. A person reads them after "millrace replay:", so only ErrUsage, which the
// command cuts off, carries the package's name.
var (
	// ErrActiveGroup is returned by Rewind when the group has members: offsets can be set
	// only while nobody consumes.
	ErrActiveGroup = errors.New("the consumer group has active members")
	// ErrStateful is returned by Rewind when the group's streamlet keeps state (a changelog
	// topic of it exists) and RewindOptions.KeepState is not set: offsets rewound, the states
	// stay as they are.
	ErrStateful = errors.New("the streamlet keeps state")
	// ErrUsage marks a mistake in what was asked (a bad target, a filter that matches nothing).
	ErrUsage = errors.New("replay: usage")
	// ErrUnreachable is returned by Rewind and Redrive when no broker of --brokers answers
	// as Kafka within a few seconds (reachTimeout): nothing listens there, or something that is not Kafka.
	ErrUnreachable = errors.New("no Kafka broker answers")
)

// reachTimeout bounds how long Rewind and Redrive wait for the first answer of a broker, so a
// wrong address is an error in seconds, not after the client's retries.
const reachTimeout = 5 * time.Second

// Kafka says how to reach the cluster.
type Kafka struct {
	Brokers []string // host:port seeds (required)
	// Conn is the connection's TLS and SASL, read from the sidecar's FLOW_KAFKA_* variables
	// (kafkaconn.FromEnv).
	Conn kafkaconn.Settings
	Opts []kgo.Opt // more client options (a logger)
}

var errNoBrokers = errors.New("no brokers: give --brokers host:port (or set FLOW_BROKERS)")

// client connects once, so that a setting the broker refuses is named, and an address where
// no Kafka answers is said within reachTimeout, before anything is read or changed; then it
// returns a client of the cluster.
func (k Kafka) client(ctx context.Context, more ...kgo.Opt) (*kgo.Client, error) {
	if len(k.Brokers) == 0 {
		return nil, errNoBrokers
	}
	err := kafkaconn.Check(ctx, k.Brokers, k.Conn, reachTimeout, k.Opts...)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, kafkaconn.ErrUnreachable):
		return nil, fmt.Errorf("%w at %s within %s (%w): check --brokers, host:port of a Kafka listener (millrace run prints its in-process broker's with --data or --follow)", ErrUnreachable, strings.Join(k.Brokers, ","), reachTimeout, err)
	default:
		return nil, fmt.Errorf("cannot connect to Kafka: %w", err)
	}
	opts := append(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, k.Conn.Opts()...), k.Opts...)
	cl, err := kgo.NewClient(append(opts, more...)...)
	if err != nil {
		return nil, fmt.Errorf("a client of %v: %w", k.Brokers, err)
	}
	return cl, nil
}

// partitions returns the partitions of topic, in order; an unknown topic is an error.
func partitions(ctx context.Context, adm *kadm.Client, topic string) ([]int32, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("the metadata of topic %s: %w (is the broker reachable?)", topic, err)
	}
	td, ok := tds[topic]
	if !ok {
		return nil, fmt.Errorf("topic %s: no metadata", topic)
	}
	if td.Err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, td.Err)
	}
	return td.Partitions.Numbers(), nil
}

// listOffsets returns, for each partition ps of topic, the offset ListOffsets answers for ts:
// -2 the log start, -1 the end, else the first record at or after ts in milliseconds (the end
// when there is none).
func listOffsets(ctx context.Context, adm *kadm.Client, topic string, ps []int32, ts int64) (map[int32]int64, error) {
	var listed kadm.ListedOffsets
	var err error
	switch ts {
	case -2:
		listed, err = adm.ListStartOffsets(ctx, topic)
	case -1:
		listed, err = adm.ListEndOffsets(ctx, topic)
	default:
		listed, err = adm.ListOffsetsAfterMilli(ctx, ts, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("listing the offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for _, p := range ps {
		o, ok := listed.Lookup(topic, p)
		if !ok {
			if err := listed.Error(); err != nil { // the topic could not be listed at all
				return nil, fmt.Errorf("listing the offsets of %s: %w", topic, err)
			}
			return nil, fmt.Errorf("listing the offsets of %s/%d: no answer", topic, p)
		}
		if o.Err != nil {
			return nil, fmt.Errorf("listing the offsets of %s/%d: %w", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out, nil
}

// group is what DescribeGroups says of a consumer group.
type group struct {
	state   string
	members []string // client id @ host of each member
}

func describeGroup(ctx context.Context, adm *kadm.Client, name string) (group, error) {
	return retry(ctx, func() (group, error) {
		described, err := adm.DescribeGroups(ctx, name)
		if err != nil {
			return group{}, fmt.Errorf("describing group %s: %w", name, err)
		}
		g, ok := described[name]
		if !ok {
			return group{}, fmt.Errorf("describing group %s: no answer", name)
		}
		if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
			return group{}, fmt.Errorf("describing group %s: %w", name, g.Err)
		}
		out := group{state: g.State}
		for _, m := range g.Members {
			out.members = append(out.members, m.ClientID+"@"+m.ClientHost)
		}
		return out, nil
	})
}

// committed returns the group's committed offsets by topic and partition.
func committed(ctx context.Context, adm *kadm.Client, name string) (map[string]map[int32]int64, error) {
	return retry(ctx, func() (map[string]map[int32]int64, error) {
		out := map[string]map[int32]int64{}
		fetched, err := adm.FetchOffsets(ctx, name)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("the committed offsets of group %s: %w", name, err)
		}
		for _, o := range fetched.Sorted() {
			if o.Err != nil {
				return nil, fmt.Errorf("the committed offset of group %s on %s/%d: %w", name, o.Topic, o.Partition, o.Err)
			}
			if o.At >= 0 {
				if out[o.Topic] == nil {
					out[o.Topic] = map[int32]int64{}
				}
				out[o.Topic][o.Partition] = o.At
			}
		}
		return out, nil
	})
}

// retry asks again while the answer is a retriable Kafka error (a coordinator still loading
// on a fresh cluster), within 10 s.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		v, err := f()
		if err == nil || !kerr.IsRetriable(err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
