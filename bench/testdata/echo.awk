# The echo of a raw script, as one is written with no SDK: it declares nothing in ready (one
# delivery at a time) and answers each item line as it reads it, flushing every answer. It
# cuts the delivery and the payload out of the line as text, which holds for the item lines
# the bridge writes for the benchmarks' records (no key, no headers: "inlet" follows the
# payload) and no others. Run it with a line-buffered awk: `mawk -W interactive -f echo.awk`
# (mawk otherwise waits for a full buffer of input), or gawk or busybox awk as they are.
/^\{"type":"item",/ {
	match($0, /"delivery":"[^"]*"/)
	d = substr($0, RSTART + 11, RLENGTH - 11)
	match($0, /"payload":.*,"inlet":/)
	p = substr($0, RSTART + 10, RLENGTH - 19)
	printf "{\"type\":\"emit\",\"delivery\":%s,\"payload\":%s}\n{\"type\":\"done\",\"delivery\":%s}\n", d, p, d
	fflush()
	next
}
/^\{"type":"hello",/ { print "{\"type\":\"ready\"}"; fflush(); next }
/^\{"type":"shutdown"/ { exit }
