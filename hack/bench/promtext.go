package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples is a scrape.
type samples []sample

// parseProm reads the Prometheus text exposition format (comments skipped).
func parseProm(r io.Reader) (samples, error) {
	var out samples
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ", ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq < 0 {
				return s, fmt.Errorf("bad labels")
			}
			key := line[:eq]
			line = line[eq+2:]
			var val strings.Builder
			j := 0
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[j])
					}
					continue
				}
				val.WriteByte(line[j])
			}
			if j == len(line) {
				return s, fmt.Errorf("unterminated label value")
			}
			s.labels[key] = val.String()
			line = line[j+1:]
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// sum adds the samples called name whose labels satisfy match (nil: all).
func (ss samples) sum(name string, match func(map[string]string) bool) float64 {
	var total float64
	for _, s := range ss {
		if s.name == name && (match == nil || match(s.labels)) {
			total += s.value
		}
	}
	return total
}

// histogram is a cumulative histogram summed over the series that matched.
type histogram struct {
	les    []float64 // upper bounds, ascending, +Inf last
	counts []float64 // cumulative
	count  float64
	sum    float64
}

// histogramOf sums histogram name (without _bucket) over the matching series.
func (ss samples) histogramOf(name string, match func(map[string]string) bool) histogram {
	byLE := map[float64]float64{}
	for _, s := range ss {
		if s.name != name+"_bucket" || (match != nil && !match(s.labels)) {
			continue
		}
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			continue
		}
		byLE[le] += s.value
	}
	h := histogram{count: ss.sum(name+"_count", match), sum: ss.sum(name+"_sum", match)}
	for le := range byLE {
		h.les = append(h.les, le)
	}
	slices.Sort(h.les)
	for _, le := range h.les {
		h.counts = append(h.counts, byLE[le])
	}
	return h
}

// minus is the histogram of the observations made between before and h.
func (h histogram) minus(before histogram) histogram {
	out := histogram{les: h.les, count: h.count - before.count, sum: h.sum - before.sum}
	for i, le := range h.les {
		c := h.counts[i]
		if j := slices.Index(before.les, le); j >= 0 {
			c -= before.counts[j]
		}
		out.counts = append(out.counts, c)
	}
	return out
}

// quantile estimates the q-quantile like PromQL's histogram_quantile: linear
// interpolation inside the bucket that holds it (so never finer than the buckets).
func (h histogram) quantile(q float64) float64 {
	if len(h.les) == 0 || h.counts[len(h.counts)-1] == 0 {
		return math.NaN()
	}
	total := h.counts[len(h.counts)-1]
	rank := q * total
	for i, c := range h.counts {
		if c < rank {
			continue
		}
		if math.IsInf(h.les[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return h.les[i-1] // above the highest finite bound
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = h.les[i-1], h.counts[i-1]
		}
		if c == below {
			return h.les[i]
		}
		return lower + (h.les[i]-lower)*(rank-below)/(c-below)
	}
	return math.NaN()
}

func (h histogram) mean() float64 {
	if h.count == 0 {
		return math.NaN()
	}
	return h.sum / h.count
}

// bucketsText shows the non-empty buckets, e.g. "≤5ms: 180, ≤25ms: 20".
func (h histogram) bucketsText() string {
	var parts []string
	prev := 0.0
	for i, le := range h.les {
		n := h.counts[i] - prev
		prev = h.counts[i]
		if n == 0 {
			continue
		}
		bound := "+Inf"
		if !math.IsInf(le, 1) {
			bound = fmtSeconds(le)
		}
		parts = append(parts, fmt.Sprintf("≤%s: %.0f", bound, n))
	}
	return strings.Join(parts, ", ")
}
