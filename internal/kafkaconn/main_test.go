package kafkaconn_test

import (
	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestMain checks, once the tests passed, that no client or broker goroutine is left behind.
func TestMain(m *testing.M) { testkit.Main(m, nil, nil) }
