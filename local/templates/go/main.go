// Command {{.Name}} is a Millstream action written with the millrace Go SDK: it greets each
// name it is given. action.Map reads the items, decodes each payload into Request, calls the
// function and writes its answers; a config that does not decode is answered per item.
package main

import (
	"errors"

	"github.com/ankka-flow/millrace/stdio/action"
)

// Config is the action's config, as hello carries it (--param greeting:string=Hello).
type Config struct {
	Greeting string `json:"greeting"`
}

// Request is an input payload.
type Request struct {
	Name string `json:"name"`
}

// Greeting is an output payload.
type Greeting struct {
	Message string `json:"message"`
}

func main() {
	action.Map(func(ctx action.Context[Config], in Request) ([]Greeting, error) {
		if in.Name == "" {
			return nil, errors.New("payload has no name")
		}
		out := Greeting{Message: ctx.Config().Greeting + ", " + in.Name + "!"}
		return []Greeting{out}, nil
	})
}
