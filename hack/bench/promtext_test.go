package main

import (
	"math"
	"strings"
	"testing"
)

const scrape = `# HELP h test
# TYPE h histogram
h_bucket{webhook="/a",le="0.1"} 2
h_bucket{webhook="/a",le="0.5"} 8
h_bucket{webhook="/a",le="+Inf"} 10
h_sum{webhook="/a"} 3
h_count{webhook="/a"} 10
h_bucket{webhook="/b",le="0.1"} 0
h_bucket{webhook="/b",le="0.5"} 0
h_bucket{webhook="/b",le="+Inf"} 0
h_sum{webhook="/b"} 0
h_count{webhook="/b"} 0
g{name="x\"y"} 1.5e+06
`

func TestHistogram(t *testing.T) {
	ss, err := parseProm(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	if got := ss.sum("g", func(l map[string]string) bool { return l["name"] == `x"y` }); got != 1.5e6 {
		t.Errorf("g = %v", got)
	}
	h := ss.histogramOf("h", nil)
	if h.count != 10 || h.sum != 3 || h.mean() != 0.3 {
		t.Errorf("count %v sum %v", h.count, h.sum)
	}
	// rank 5 of 10: 3 into the (0.1, 0.5] bucket of 6 → 0.1 + 0.4*3/6 = 0.3
	if q := h.quantile(0.5); math.Abs(q-0.3) > 1e-9 {
		t.Errorf("p50 = %v", q)
	}
	if q := h.quantile(0.99); q != 0.5 {
		t.Errorf("p99 = %v, want the highest finite bound", q)
	}
	empty := h.minus(h)
	if !math.IsNaN(empty.quantile(0.5)) || empty.count != 0 {
		t.Errorf("empty delta: %+v", empty)
	}
}
