package main

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/ankka-flow/millrace/protocol"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3". Without it the
// module version recorded in the binary is used, else "dev".
var version = ""

// Version returns the version of this binary.
func Version() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fs.usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	fmt.Fprintf(e.stdout, "millrace %s (protocol %s)\n", Version(), protocol.Version)
	return nil
}
