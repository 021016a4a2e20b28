#!/usr/bin/env bash
# {{.Name}}: a Millstream action in bash with jq. Reads one JSON line at a time on stdin and
# answers on stdout; anything meant for a person goes to stderr.
set -u

config='{}'

# answer: one item in, its answer lines out (emits, then done or error). jq -c writes one
# JSON object per line; --argjson hands it the config from hello.
read -r -d '' answer <<'JQ'
.delivery as $d
| if ($config.greeting | type) != "string" then
    {type: "error", delivery: $d, retryable: false, message: "config greeting must be a string"}
  elif (.payload | type) != "object" or (.payload.name | type) != "string" or .payload.name == "" then
    {type: "error", delivery: $d, retryable: false, message: "payload has no name"}
  else
    ({type: "emit", delivery: $d, payload: {message: "\($config.greeting), \(.payload.name)!"}}
      + (if has("key") then {key} else {} end)),
    {type: "done", delivery: $d}
  end
JQ

while IFS= read -r line; do
  type=$(jq -r '.type // empty' <<<"$line" 2>/dev/null) || { echo "{{.Name}}: an input line is not JSON" >&2; continue; }
  case "$type" in
    hello)
      config=$(jq -c '.config // {} | objects' <<<"$line")
      [ -n "$config" ] || config='{}'
      echo '{"type":"ready"}'
      ;;
    item) jq -c --argjson config "$config" "$answer" <<<"$line" ;;
    shutdown) exit 0 ;;
    *) ;; # unknown messages are ignored: the protocol may grow
  esac
done
