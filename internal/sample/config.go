// Package sample measures per-flow delay distributions from consistently
// sampled packets (trajectory sampling in the spirit of RFC 5475): both taps
// select the same packets from the packet hash they already compute, the
// sender ships the send times of its selection with the interval, and the
// receiver joins them with its own receive times. Each joined sample is an
// exact one-way delay; a sample the sender shipped and the receiver never
// saw is a lost packet.
//
// Selection has two stages (docs/sampling.md):
//   - candidates: a packet is a candidate at both ends when its mixed packet
//     hash s is below a global limit (1 in sample.one_in packets). The
//     selection depends on the hash only, never on time or on the interval,
//     so the receiver keeps exactly the sender's candidates (less the lost
//     packets).
//   - per flow, the sender keeps the candidates with the smallest s
//     (bottom-k: a per-flow threshold that falls as the flow grows),
//     sample.max_per_interval in all: first a floor of
//     sample.min_per_flow for every flow of at least that many
//     candidates, heaviest first, within half the budget; then for the
//     max_per_interval / per_flow heaviest of them, per_flow each or
//     more as the rest allows, then for lighter flows; plus
//     a uniform link sample (1 in sample.link_one_in packets, all flows)
//     for the per-class delay histogram.
//
// The receiver keeps every candidate it sees for a few intervals and looks
// each shipped sample up by flow and hash. The package is a leaf: it knows
// packets (internal/capture) and nothing of intervals or the wire.
package sample

import (
	"errors"
	"fmt"
	"math/bits"
)

// Config is the `sample:` section of both daemons' configuration.
type Config struct {
	// OneIn: one packet in OneIn is a candidate (a power of two, 1..65536).
	// The receiver keeps its candidates for the join; the sender picks its
	// samples among them. Both ends may differ: the join only uses what
	// both kept.
	OneIn int `yaml:"one_in"`
	// PerFlow: samples per flow and interval (bottom-k) that decide how
	// many of the heaviest flows get the budget first: MaxPerInterval /
	// PerFlow of them (the tracked share, among the flows of at least
	// MinP50 candidates). What they leave of it raises their common cap
	// (water-filling), then goes to lighter flows (Select). Keep
	// PerFlow × metrics.top_n <= MaxPerInterval so that every tracked flow
	// can carry quantiles.
	PerFlow int `yaml:"per_flow"`
	// MinPerFlow: the floor, samples that every flow of at least that
	// many candidates (and MinP50) gets first, heaviest first, within half
	// of MaxPerInterval, before the tracked share is raised: enough for a
	// mean delay where all the flow's sketch cells are lossy (Select).
	// 0: no floor. Used up to PerFlow / 2, so that the tracked share's
	// floors take at most half the budget.
	MinPerFlow int `yaml:"min_per_flow"`
	// MaxPerInterval: flow samples shipped per interval at most, heaviest
	// flows first. 0 disables per-flow samples.
	MaxPerInterval int `yaml:"max_per_interval"`
	// LinkOneIn: the uniform link sample, one packet in LinkOneIn (a power of
	// two, a multiple of OneIn); 0 disables it.
	LinkOneIn int `yaml:"link_one_in"`
	// MaxCandidates bounds the candidates one end holds per interval and
	// capture worker: beyond it, the candidate rate halves (counted) so
	// that memory stays bounded whatever the traffic.
	MaxCandidates int `yaml:"max_candidates"`
}

// DefaultConfig returns the defaults (docs/sampling.md explains them).
func DefaultConfig() Config {
	return Config{OneIn: 4, PerFlow: 160, MinPerFlow: 16, MaxPerInterval: 16384, LinkOneIn: 1024, MaxCandidates: 1 << 21}
}

// Validate names the key that is wrong and what would be right.
func (c Config) Validate() error {
	var errs []error
	pow2 := func(v int) bool { return v > 0 && v&(v-1) == 0 }
	if !pow2(c.OneIn) || c.OneIn > 1<<16 {
		errs = append(errs, fmt.Errorf("sample.one_in: %d must be a power of two in 1..65536 (default 4)", c.OneIn))
	}
	if c.PerFlow < 1 || c.PerFlow > 1<<16 {
		errs = append(errs, fmt.Errorf("sample.per_flow: %d must be in 1..65536 (default 160)", c.PerFlow))
	}
	if c.MinPerFlow < 0 || c.MinPerFlow > 1<<16 {
		errs = append(errs, fmt.Errorf("sample.min_per_flow: %d must be in 0..65536 (default 16; 0: no floor)", c.MinPerFlow))
	}
	if c.MaxPerInterval < 0 || c.MaxPerInterval > 1<<22 {
		errs = append(errs, fmt.Errorf("sample.max_per_interval: %d must be in 0..4194304 (default 16384; 0 ships no flow samples)", c.MaxPerInterval))
	}
	if c.LinkOneIn != 0 && (!pow2(c.LinkOneIn) || c.LinkOneIn > 1<<30 || c.LinkOneIn < c.OneIn) {
		errs = append(errs, fmt.Errorf("sample.link_one_in: %d must be 0 (off) or a power of two in sample.one_in (%d)..2^30 (default 1024)", c.LinkOneIn, c.OneIn))
	}
	if c.MaxCandidates < 1024 || c.MaxCandidates > 1<<26 {
		errs = append(errs, fmt.Errorf("sample.max_candidates: %d must be in 1024..67108864 (default 2097152)", c.MaxCandidates))
	}
	return errors.Join(errs...)
}

// level is log2(OneIn): a candidate has s < 2^(64-level).
func (c Config) level() uint { return uint(bits.TrailingZeros(uint(c.OneIn))) }

// linkLevel is log2(LinkOneIn) (0: off).
func (c Config) linkLevel() uint {
	if c.LinkOneIn == 0 {
		return 0
	}
	return uint(bits.TrailingZeros(uint(c.LinkOneIn)))
}

// Mix derives the sampling value s from a packet hash. The sketches use the
// packet hash's bits directly (rows, signs, LDA banks); s is a bijective
// remix (xor, odd multiply, xorshift) so that being sampled does not pick
// packets by where they sit in them.
func Mix(pktHash uint64) uint64 {
	x := (pktHash ^ 0x6a09e667f3bcc909) * 0x9fb21c651e98df25
	return x ^ x>>31
}

// limitOf is the exclusive bound on s of level l (l >= 1); level 0 keeps all.
func limitOf(l uint) uint64 {
	if l == 0 {
		return ^uint64(0)
	}
	return 1 << (64 - l)
}
