// Command convert-currency converts order totals into another currency. It shows the Go SDK
// (stdio/action) with a typed config: the engine's config object decodes into Config once at
// start, and a config that does not decode is answered per item, never by a crash.
package main

import (
	"errors"
	"fmt"
	"math"

	"github.com/ankka-flow/millrace/stdio/action"
)

// Config is the action's config, as declared by the --param flags of action.conf.
type Config struct {
	From     string  `json:"from"`
	To       string  `json:"to"`
	Rate     float64 `json:"rate"`
	Decimals int     `json:"decimals"`
}

// Total is an order total, as route-orders writes it.
type Total struct {
	OrderID  string  `json:"order_id"`
	Customer string  `json:"customer"`
	Currency string  `json:"currency,omitempty"` // absent: the config's From
	Lines    int     `json:"lines"`
	Net      float64 `json:"net"`
	Gross    float64 `json:"gross"`
}

// Converted is a total in the target currency, with the rate applied.
type Converted struct {
	OrderID  string  `json:"order_id"`
	Customer string  `json:"customer"`
	Currency string  `json:"currency"`
	Rate     float64 `json:"rate"`
	Net      float64 `json:"net"`
	Gross    float64 `json:"gross"`
}

func main() {
	action.MapKeyed(convert)
}

// convert answers one total. The action has two outlets, so its output names its own; the
// other, unconverted, is where --fallback routes what it abstains on.
func convert(ctx action.Context[Config], in Total) ([]action.Keyed[Converted], error) {
	cfg := ctx.Config()
	if cfg.Rate <= 0 || cfg.Decimals < 0 || cfg.Decimals > 8 {
		return nil, fmt.Errorf("config: rate must be positive and decimals between 0 and 8, got rate %v, decimals %d", cfg.Rate, cfg.Decimals)
	}
	if in.OrderID == "" {
		return nil, errors.New("payload is not an order total: order_id is missing")
	}
	currency := in.Currency
	if currency == "" {
		currency = cfg.From
	}
	if currency != cfg.From {
		return nil, ctx.Abstain(fmt.Sprintf("total is in %s, this action converts %s", currency, cfg.From))
	}
	round := func(v float64) float64 {
		p := math.Pow10(cfg.Decimals)
		return math.Round(v*cfg.Rate*p) / p
	}
	out := Converted{OrderID: in.OrderID, Customer: in.Customer, Currency: cfg.To, Rate: cfg.Rate, Net: round(in.Net), Gross: round(in.Gross)}
	ctx.Metric("converted_gross", out.Gross, map[string]string{"currency": cfg.To})
	return []action.Keyed[Converted]{{Value: out, Outlet: "converted"}}, nil
}
