#!/usr/bin/env bash
# dedup-bash: drops an event whose id its key has seen within the window, in bash with jq.
# The key's state is {"seen": {ID: TIMESTAMP_MS, ...}}: the ids the key has passed on, each with
# its record's timestamp. ready says "state": true, so each item carries its key's state in
# .state (absent when none); a {"type":"state",...} line before done stages the new one.
set -u

config='{}'

# answer: one item in, its answer lines out. A duplicate is answered done alone (no emit, no
# state: the state stays as it was, and the sidecar's TTL counts from the last new id). A new id
# is emitted, then the pruned ids plus this one are staged, then done. A keyless item has no
# state: it is passed on. --argjson hands jq the config from hello.
read -r -d '' answer <<'JQ'
# seconds: a Go duration string ("24h0m0s", "90s", "1h30m") in seconds; null when it is not one
def seconds:
  if type == "string" and test("^([0-9]+(\\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$") then
    [scan("([0-9]+(?:\\.[0-9]*)?)(ns|us|µs|ms|s|m|h)")
     | (.[0] | tonumber) * {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}[.[1]]]
    | add
  elif . == "0" then 0
  else null end;
.delivery as $d
| .payload as $p
| (($config.within | seconds) // null) as $within
| ($config["max-ids"]) as $max
| (if has("key") then {key} elif has("keyBase64") then {keyBase64} else {} end) as $key
| if $within == null or ($max | type) != "number" or $max < 1 then
    {type: "error", delivery: $d, retryable: false, message: "config within must be a duration and max-ids a positive integer"}
  elif ($p | type) != "object" or ($p.id | type) != "string" or $p.id == "" then
    {type: "error", delivery: $d, retryable: false, message: "payload has no id"}
  elif $key == {} then
    {type: "emit", delivery: $d, payload: $p}, {type: "done", delivery: $d}
  else
    ($within * 1000) as $window
    | (.timestamp // 0) as $now
    | ((.state | if type == "object" then .seen else null end) | if type == "object" then . else {} end) as $seen
    | if ($seen[$p.id] | type) == "number" and $now - $seen[$p.id] < $window then
        {type: "done", delivery: $d}
      else
        ($seen
          | with_entries(select((.value | type) == "number" and $now - .value < $window))
          | .[$p.id] = $now
          | if length > $max then to_entries | sort_by(.value) | .[-$max:] | from_entries else . end
        ) as $kept
        | {type: "emit", delivery: $d, payload: $p} + $key,
          {type: "state", delivery: $d, state: {seen: $kept}},
          {type: "done", delivery: $d}
      end
  end
JQ

while IFS= read -r line; do
  type=$(jq -r '.type // empty' <<<"$line" 2>/dev/null) || { echo "dedup-bash: an input line is not JSON" >&2; continue; }
  case "$type" in
    hello)
      config=$(jq -c '.config // {} | objects' <<<"$line")
      [ -n "$config" ] || config='{}'
      echo '{"type":"ready","state":true}'
      ;;
    item) jq -c --argjson config "$config" "$answer" <<<"$line" ;;
    shutdown) exit 0 ;;
    *) ;; # unknown messages are ignored: the protocol may grow
  esac
done
