#!/usr/bin/env bash
# drop-debug: a Millstream action in bash with jq. Reads one JSON line at a time on stdin and
# answers on stdout; anything meant for a person goes to stderr.
set -u

rank() { case "$1" in debug) echo 0;; info) echo 1;; warn) echo 2;; error) echo 3;; *) echo -1;; esac; }
min=1

while IFS= read -r line; do
  type=$(jq -r '.type // empty' <<<"$line" 2>/dev/null) || { echo "drop-debug: input is not JSON" >&2; continue; }
  case "$type" in
    hello)
      level=$(jq -r '.config["min-level"] // "info"' <<<"$line")
      min=$(rank "$level")
      [ "$min" -ge 0 ] || echo "drop-debug: unknown min-level \"$level\"; every item will fail" >&2
      echo '{"type":"ready"}'
      ;;
    item)
      delivery=$(jq -c '.delivery' <<<"$line")
      if [ "$min" -lt 0 ]; then
        echo "{\"type\":\"error\",\"delivery\":$delivery,\"message\":\"config min-level must be one of debug, info, warn, error\",\"retryable\":false}"
        continue
      fi
      level=$(jq -r '.payload.level // "info"' <<<"$line" 2>/dev/null)
      if [ "$(rank "$level")" -ge "$min" ]; then
        # keep the key when the record has one; pass the payload through untouched
        jq -c '{type: "emit", delivery, payload} + (if has("key") then {key} else {} end)' <<<"$line"
      fi
      echo "{\"type\":\"done\",\"delivery\":$delivery}"
      ;;
    shutdown) exit 0 ;;
    *) ;; # unknown messages are ignored: the protocol may grow
  esac
done
