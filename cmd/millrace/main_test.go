package main

import (
	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestMain checks, once the tests passed, that no goroutine of a command run in-process
// (dispatch: run's broker, servers and clients) is left behind.
func TestMain(m *testing.M) { testkit.Main(m, nil, nil) }
