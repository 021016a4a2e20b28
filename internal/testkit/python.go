package testkit

// PythonAnswerer is the program of a raw Python action for tests of how faults are reported: it
// answers hello with ready, and each item with answer, Python statements on one line in which
// m is the item, out is sys.stdout and send(msg) writes one message and flushes. A test writes
// it to main.py and runs it with python3 (which scripts/setup installs).
func PythonAnswerer(answer string) string {
	return `import json, sys
out = sys.stdout
def send(msg):
    out.write(json.dumps(msg) + "\n")
    out.flush()
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "hello":
        send({"type": "ready"})
    elif m["type"] == "item":
        ` + answer + `
    elif m["type"] == "shutdown":
        break
`
}
