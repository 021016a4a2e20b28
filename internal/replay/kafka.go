// Package replay is `millrace replay`: it rewinds a streamlet's consumer group to a time or
// to offsets, and re-drives records from a dead-letter topic back to the topics they came
// from. Both talk to Kafka with franz-go's raw requests; neither needs the streamlet running
// (a rewind needs it stopped).
package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/sidecar/kafkaconn"
)

// Kafka says how to reach the cluster.
type Kafka struct {
	Brokers []string // host:port seeds (required)
	// Conn is the connection's TLS and SASL, read from the sidecar's FLOW_KAFKA_* variables
	// (kafkaconn.FromEnv).
	Conn kafkaconn.Settings
	Opts []kgo.Opt // more client options (a logger)
}

var errNoBrokers = errors.New("replay: no brokers: give --brokers host:port (or set FLOW_BROKERS)")

// check connects once, so that a setting the broker refuses is named before anything is
// read or changed.
func (k Kafka) check(ctx context.Context) error {
	if len(k.Brokers) == 0 {
		return errNoBrokers
	}
	if err := kafkaconn.Check(ctx, k.Brokers, k.Conn, kafkaconn.CheckTimeout, k.Opts...); err != nil {
		return fmt.Errorf("replay: cannot connect to Kafka: %w", err)
	}
	return nil
}

func (k Kafka) client(more ...kgo.Opt) (*kgo.Client, error) {
	if len(k.Brokers) == 0 {
		return nil, errNoBrokers
	}
	opts := append(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, k.Conn.Opts()...), k.Opts...)
	cl, err := kgo.NewClient(append(opts, more...)...)
	if err != nil {
		return nil, fmt.Errorf("replay: a client of %v: %w", k.Brokers, err)
	}
	return cl, nil
}

// partitions returns the partitions of topic, in order; an unknown topic is an error.
func partitions(ctx context.Context, cl *kgo.Client, topic string) ([]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, mt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("replay: the metadata of topic %s: %w (is the broker reachable?)", topic, err)
	}
	if len(resp.Topics) == 0 {
		return nil, fmt.Errorf("replay: topic %s: no metadata", topic)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("replay: topic %s: %w", topic, err)
	}
	var ps []int32
	for _, p := range resp.Topics[0].Partitions {
		ps = append(ps, p.Partition)
	}
	slices.Sort(ps)
	return ps, nil
}

// topicIDs returns the ids of every topic and the names of every id (OffsetCommit and
// OffsetFetch name topics by id from their version 10).
func topicIDs(ctx context.Context, cl *kgo.Client) (map[string][16]byte, map[[16]byte]string, error) {
	req := kmsg.NewPtrMetadataRequest() // no topics: every topic
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: the cluster's topics: %w (is the broker reachable?)", err)
	}
	ids, names := map[string][16]byte{}, map[[16]byte]string{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			ids[*t.Topic], names[t.TopicID] = t.TopicID, *t.Topic
		}
	}
	return ids, names, nil
}

// listOffsets returns, for each partition of topic, the offset ListOffsets answers for ts:
// -2 the log start, -1 the end, else the first record at or after ts in milliseconds (the end
// when there is none).
func listOffsets(ctx context.Context, cl *kgo.Client, topic string, ps []int32, ts int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range ps {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, ts
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("replay: listing the offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("replay: listing the offsets of %s/%d: %w", topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	if ts >= 0 { // no record at or after ts: the end
		var missing []int32
		for p, o := range out {
			if o < 0 {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			end, err := listOffsets(ctx, cl, topic, missing, -1)
			if err != nil {
				return nil, err
			}
			for p, o := range end {
				out[p] = o
			}
		}
	}
	return out, nil
}

// group is what DescribeGroups says of a consumer group.
type group struct {
	state   string
	members []string // client id @ host of each member
}

func describeGroup(ctx context.Context, cl *kgo.Client, name string) (group, error) {
	return retry(ctx, func() (group, error) {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{name}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return group{}, fmt.Errorf("replay: describing group %s: %w", name, err)
		}
		if len(resp.Groups) == 0 {
			return group{}, fmt.Errorf("replay: describing group %s: no answer", name)
		}
		g := resp.Groups[0]
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return group{}, fmt.Errorf("replay: describing group %s: %w", name, err)
		}
		out := group{state: g.State}
		for _, m := range g.Members {
			out.members = append(out.members, m.ClientID+"@"+m.ClientHost)
		}
		return out, nil
	})
}

// committed returns the group's committed offsets by topic and partition.
func committed(ctx context.Context, cl *kgo.Client, name string) (map[string]map[int32]int64, error) {
	return retry(ctx, func() (map[string]map[int32]int64, error) {
		req := kmsg.NewPtrOffsetFetchRequest()
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = name
		req.Groups = append(req.Groups, rg)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("replay: the committed offsets of group %s: %w", name, err)
		}
		out := map[string]map[int32]int64{}
		var names map[[16]byte]string
		for _, g := range resp.Groups {
			if err := kerr.ErrorForCode(g.ErrorCode); errors.Is(err, kerr.GroupIDNotFound) {
				return out, nil
			} else if err != nil {
				return nil, fmt.Errorf("replay: the committed offsets of group %s: %w", name, err)
			}
			for _, t := range g.Topics {
				if t.Topic == "" { // named by id
					if names == nil {
						if _, names, err = topicIDs(ctx, cl); err != nil {
							return nil, err
						}
					}
					t.Topic = names[t.TopicID]
				}
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						return nil, fmt.Errorf("replay: the committed offset of group %s on %s/%d: %w", name, t.Topic, p.Partition, err)
					}
					if p.Offset >= 0 {
						if out[t.Topic] == nil {
							out[t.Topic] = map[int32]int64{}
						}
						out[t.Topic][p.Partition] = p.Offset
					}
				}
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
