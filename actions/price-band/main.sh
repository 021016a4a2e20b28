#!/usr/bin/env bash
# price-band: a Millstream action in bash with jq. Its inlet is Avro and its outlet Protobuf on
# Kafka, yet it reads and writes JSON lines only: the bridge decodes each listing into the Avro
# JSON encoding (a union's value as {"string": "Oslo"}, null as null) and encodes each emit,
# written in the proto3 JSON mapping (lowerCamelCase names, enums by name), with the outlet's
# schema. One jq per line answers it; anything meant for a person goes to stderr.
set -u

answer='
  if .type == "hello" then {type: "ready"}
  elif .type == "shutdown" then "shutdown"
  elif .type != "item" then empty
  else
    .delivery as $d | .payload as $l |
    if ($l.rooms // 0) < 1 then
      {type: "error", delivery: $d, retryable: false, message: "listing \($l.id) has no rooms: no price per room"}
    else
      ($l.price / $l.rooms) as $ppr |
      ({type: "emit", delivery: $d, outlet: "bands",
        payload: ({listingId: $l.id}
                  + (if $l.city then {city: $l.city.string} else {} end)
                  + {rooms: $l.rooms, pricePerRoom: $ppr,
                     band: (if $ppr < 100000 then "LOW" elif $ppr < 200000 then "MID" else "HIGH" end)})}
       + (if has("key") then {key} else {} end)),
      {type: "done", delivery: $d}
    end
  end'

while IFS= read -r line; do
  out=$(jq -c "$answer" <<<"$line") || { echo "price-band: cannot read line: ${line:0:80}" >&2; continue; }
  [ "$out" = '"shutdown"' ] && exit 0
  [ -n "$out" ] && printf '%s\n' "$out"
done
