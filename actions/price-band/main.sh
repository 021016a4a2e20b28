#!/usr/bin/env bash
# price-band: a Millstream action in bash with jq. Its inlet is Avro and its outlet Protobuf on
# Kafka, yet it reads and writes JSON lines only: the bridge decodes each listing into the Avro
# JSON encoding (a union's value as {"string": "Oslo"}, null as null) and encodes each emit,
# written in the proto3 JSON mapping (lowerCamelCase names, enums by name), with the outlet's
# schema. Anything meant for a person goes to stderr.
set -u

while IFS= read -r line; do
  type=$(jq -r '.type // empty' <<<"$line" 2>/dev/null) || { echo "price-band: input is not JSON" >&2; continue; }
  case "$type" in
    hello) echo '{"type":"ready"}' ;;
    item)
      jq -c '
        .delivery as $d | .payload as $l |
        if ($l.rooms // 0) < 1 then
          {type: "error", delivery: $d, retryable: false, message: "listing \($l.id) has no rooms: no price per room"}
        else
          ($l.price / $l.rooms) as $ppr |
          {type: "emit", delivery: $d, outlet: "bands",
           payload: {listingId: $l.id, city: ($l.city.string // ""), rooms: $l.rooms,
                     pricePerRoom: $ppr,
                     band: (if $ppr < 100000 then "LOW" elif $ppr < 200000 then "MID" else "HIGH" end)}}
          + (if has("key") then {key} else {} end)
        end' <<<"$line"
      # an emit is confirmed by done; an error answer ends the delivery by itself
      if jq -e '(.payload.rooms // 0) >= 1' <<<"$line" >/dev/null; then
        echo "{\"type\":\"done\",\"delivery\":$(jq -c '.delivery' <<<"$line")}"
      fi
      ;;
    shutdown) exit 0 ;;
    *) ;; # unknown messages are ignored: the protocol may grow
  esac
done
