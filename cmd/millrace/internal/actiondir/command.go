package actiondir

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CommandFault says why argv cannot be executed in dir, or "" when it can be (as far as can
// be told without running it).
func CommandFault(dir string, argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	name := argv[0]
	if !strings.Contains(name, "/") {
		if _, err := exec.LookPath(name); err == nil {
			return ""
		}
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && !st.IsDir() {
			return fmt.Sprintf("command %q is not found on PATH, but %s is in the action's folder: write ./%s after -- (or name its interpreter, e.g. -- %s %s)", name, name, name, interpreter(name), name)
		}
		return fmt.Sprintf("command %q is not found on PATH: install it (the runtime the action needs), or check PATH and the command after -- on the config line", name)
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s does not exist (in %s): check the command after -- on the config line", name, dir)
	case err != nil:
		return fmt.Sprintf("%s cannot be read: %v", name, err)
	case st.IsDir():
		return fmt.Sprintf("%s is a folder, not a program: check the command after -- on the config line", name)
	case st.Mode()&0o111 == 0:
		return fmt.Sprintf("%s is not executable (permission denied): chmod +x %s", name, filepath.Base(path))
	}
	head := make([]byte, 256)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("%s cannot be read: %v", name, err)
	}
	n, _ := f.Read(head)
	f.Close()
	head = head[:n]
	if !bytes.HasPrefix(head, []byte("#!")) {
		if isBinary(head) {
			return ""
		}
		return fmt.Sprintf("%s has no #! line, so it cannot be executed (exec format error): add #!/usr/bin/env %s as its first line", name, interpreter(name))
	}
	line, _, _ := bytes.Cut(head[2:], []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return fmt.Sprintf("%s has an empty #! line: write #!/usr/bin/env %s", name, interpreter(name))
	}
	interp := fields[0]
	if filepath.Base(interp) == "env" && len(fields) > 1 && !strings.HasPrefix(fields[1], "-") {
		if _, err := exec.LookPath(fields[1]); err != nil {
			return fmt.Sprintf("%s runs %q (its #! line), which is not found on PATH: install it, or correct the #! line", name, fields[1])
		}
		return ""
	}
	if _, err := os.Stat(interp); err != nil {
		return fmt.Sprintf("%s runs %s (its #! line), which does not exist: install it, or write #!/usr/bin/env %s", name, interp, interpreter(name))
	}
	return ""
}

// isBinary reports whether head starts like an executable binary (ELF, Mach-O).
func isBinary(head []byte) bool {
	for _, magic := range [][]byte{{0x7f, 'E', 'L', 'F'}, {0xfe, 0xed, 0xfa, 0xce}, {0xfe, 0xed, 0xfa, 0xcf}, {0xce, 0xfa, 0xed, 0xfe}, {0xcf, 0xfa, 0xed, 0xfe}, {0xca, 0xfe, 0xba, 0xbe}} {
		if bytes.HasPrefix(head, magic) {
			return true
		}
	}
	return false
}

// interpreter guesses a program's interpreter from its name, for a hint.
func interpreter(name string) string {
	switch filepath.Ext(name) {
	case ".py":
		return "python3"
	case ".js", ".mjs", ".cjs":
		return "node"
	case ".rb":
		return "ruby"
	case ".sh":
		return "bash"
	case ".pl":
		return "perl"
	}
	return "INTERPRETER"
}
