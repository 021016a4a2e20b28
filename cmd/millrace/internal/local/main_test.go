package local_test

import (
	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil, nil) }
