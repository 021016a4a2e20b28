#!/usr/bin/env bash
# {{.Name}}: a Millstream action in bash with jq. Reads one JSON line at a time on stdin and
# answers on stdout; anything meant for a person goes to stderr.
set -u
# This script answers one item at a time. If it waits on a call (curl, a database), add
# --concurrency 8 to the action line: 8 processes, each one item at a time.

config='{}'

# answer: one item in, its answer lines out (emits, then done or error). jq -c writes one
# JSON object per line; --argjson hands it the config from hello.
{{- if .State}}
# State per key: .state is the key's state (absent when none); a {"type":"state",...} line
# before done stages the next one, applied only if the item is done (null would delete it).
# A keyless record has no state: it stages none.
{{- end}}
read -r -d '' answer <<'JQ'
.delivery as $d
| if ($config.greeting | type) != "string" then
    {type: "error", delivery: $d, retryable: false, message: "config greeting must be a string"}
  elif (.payload | type) != "object" or (.payload.name | type) != "string" or .payload.name == "" then
    {type: "error", delivery: $d, retryable: false, message: "payload has no name"}
  else
{{- if .State}}
    (((.state | objects | .visits | numbers) // 0) + 1) as $n
    | ({type: "emit", delivery: $d, payload: {message: "\($config.greeting), \(.payload.name)!", visits: $n}}
        + (if has("key") then {key} else {} end)),
      (if has("key") or has("keyBase64") then {type: "state", delivery: $d, state: {visits: $n}} else empty end),
      {type: "done", delivery: $d}
{{- else}}
    ({type: "emit", delivery: $d, payload: {message: "\($config.greeting), \(.payload.name)!"}}
      + (if has("key") then {key} else {} end)),
    {type: "done", delivery: $d}
{{- end}}
  end
JQ

while IFS= read -r line; do
  type=$(jq -r '.type // empty' <<<"$line" 2>/dev/null) || { echo "{{.Name}}: an input line is not JSON" >&2; continue; }
  case "$type" in
    hello)
      config=$(jq -c '.config // {} | objects' <<<"$line")
      [ -n "$config" ] || config='{}'
      echo '{"type":"ready"{{if .State}},"state":true{{end}}}'
      ;;
    item) jq -c --argjson config "$config" "$answer" <<<"$line" ;;
    shutdown) exit 0 ;;
    *) ;; # unknown messages are ignored: the protocol may grow
  esac
done
