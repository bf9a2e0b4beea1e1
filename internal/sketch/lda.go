package sketch

import (
	"errors"
	"fmt"
	"math"
)

// Limits for LDA dimensions (configuration and decoding).
const (
	MaxLDABanks = 32
	MaxLDACells = 1 << 20 // per bank
)

// LDAParams sizes a Lossy Difference Aggregator (Kompella et al., ToN 2012,
// section III): Banks banks of Cells accumulator-counter pairs each.
//
// Banks sample disjointly by the leading zeros of the mixed packet hash:
// bank b < Banks-1 takes the packets with exactly b leading zeros (rate
// 2^-(b+1)), the last bank takes the rest (rate 2^-(Banks-1)). Every packet
// lands in exactly one bank, so the counters also give exact totals, and the
// banks cover loss rates spread by powers of two.
type LDAParams struct {
	Banks int
	Cells int // per bank; even, because the variance estimator pairs cells 2i and 2i+1
}

// DefaultLDAParams is 8 banks of 512 cells (rates 1/2 ... 1/128, 96 KiB).
func DefaultLDAParams() LDAParams { return LDAParams{Banks: 8, Cells: 512} }

// Validate names the YAML keys lda.banks and lda.cells.
func (p LDAParams) Validate() error {
	var errs []error
	if p.Banks < 1 || p.Banks > MaxLDABanks {
		errs = append(errs, fmt.Errorf("lda.banks = %d: must be in [1, %d]", p.Banks, MaxLDABanks))
	}
	if p.Cells < 2 || p.Cells > MaxLDACells || p.Cells%2 != 0 {
		errs = append(errs, fmt.Errorf("lda.cells = %d: must be even and in [2, %d]", p.Cells, MaxLDACells))
	}
	return errors.Join(errs...)
}

// BankRate is the sampling rate of bank b.
func (p LDAParams) BankRate(b int) float64 {
	if b >= p.Banks-1 {
		return math.Ldexp(1, -(p.Banks - 1))
	}
	return math.Ldexp(1, -(b + 1))
}

// LDACell is one accumulator-counter pair, plus an XOR digest of the packet
// hashes that catches packets swapped across an interval boundary.
type LDACell struct {
	S int64  // Σ t (ns relative to the interval start)
	N int64  // packets
	D uint64 // XOR of packet digests (the top DigestBits bits of each packet hash)
}

// LDA is a multi-bank Lossy Difference Aggregator. Not safe for concurrent
// use; merge per-worker instances.
type LDA struct {
	p     LDAParams
	m     uint64
	cells []LDACell // bank-major: index b*Cells + i
}

// NewLDA allocates an empty aggregator.
func NewLDA(p LDAParams) (*LDA, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("lda parameters: %w", err)
	}
	return &LDA{p: p, m: uint64(p.Cells), cells: make([]LDACell, p.Banks*p.Cells)}, nil
}

// Params returns the parameters.
func (a *LDA) Params() LDAParams { return a.p }

// Update records one packet at time t (ns relative to the interval start).
// It allocates nothing.
func (a *LDA) Update(pktHash uint64, t int64) { a.UpdateAt(a.Locate(pktHash), pktHash, t) }

// AppendLines appends the addresses of the first and last byte of the
// cell Update writes for the packet, for a prefetch.
func (a *LDA) AppendLines(pktHash uint64, dst []uintptr) []uintptr {
	return a.AppendCellLines(a.Locate(pktHash), dst)
}

// Cell returns cell i of bank b.
func (a *LDA) Cell(bank, i int) LDACell { return a.cells[bank*a.p.Cells+i] }

// Reset empties the aggregator, keeping its memory.
func (a *LDA) Reset() { clear(a.cells) }

// Merge adds o into a (sums add, digests XOR).
func (a *LDA) Merge(o *LDA) error {
	if a.p != o.p {
		return fmt.Errorf("merge LDAs: parameters differ (banks %d/%d, cells %d/%d); only aggregators with the same configuration merge",
			a.p.Banks, o.p.Banks, a.p.Cells, o.p.Cells)
	}
	for i := range a.cells {
		a.cells[i].S += o.cells[i].S
		a.cells[i].N += o.cells[i].N
		a.cells[i].D ^= o.cells[i].D
	}
	return nil
}

// Equal reports whether both have the same parameters and cells.
func (a *LDA) Equal(o *LDA) bool {
	if a.p != o.p {
		return false
	}
	for i := range a.cells {
		if a.cells[i] != o.cells[i] {
			return false
		}
	}
	return true
}

// Total is the number of packets recorded (every packet lands in one bank).
func (a *LDA) Total() uint64 {
	var n int64
	for _, c := range a.cells {
		n += c.N
	}
	return uint64(n)
}

// LinkEstimate is the aggregate (all measured traffic of the class) result.
type LinkEstimate struct {
	Sent, Received uint64 // exact totals
	Lost           int64  // Sent - Received (negative if packets arrived from another interval)
	LossRatio      float64
	Delay          float64 // mean, ns; NaN if no usable cell
	Stddev         float64 // ns; NaN if none
	CI95           float64 // ns; NaN if none
	Samples        float64 // effective sample size (packets in usable cells)
}

// EstimateLDA computes delay, standard deviation and loss from the two
// ends' aggregators of the same interval. If their parameters differ, only
// the totals are filled in.
func EstimateLDA(snd, rcv *LDA) LinkEstimate {
	est := LinkEstimate{Delay: nan, Stddev: nan, CI95: nan, LossRatio: nan}
	if snd == nil || rcv == nil {
		return est
	}
	est.Sent, est.Received = snd.Total(), rcv.Total()
	est.Lost = int64(est.Sent) - int64(est.Received)
	if est.Sent > 0 {
		est.LossRatio = float64(est.Lost) / float64(est.Sent)
	}
	if snd.p != rcv.p {
		return est
	}
	// Average (section III-D): pool every usable cell of every bank.
	var sumS, sumN int64
	for i, s := range snd.cells {
		r := rcv.cells[i]
		if s.N > 0 && s.N == r.N && s.D == r.D {
			sumS += r.S - s.S
			sumN += s.N
		}
	}
	if sumN == 0 {
		return est
	}
	mean := float64(sumS) / float64(sumN)
	est.Delay = mean
	est.Samples = float64(sumN)

	// Standard deviation (section III-E): cells 2i (σ = +1) and 2i+1
	// (σ = -1) collapse into one signed accumulator. The paper squares
	// ΔT̃ and subtracts μ² (eq. 3, 5); we centre first,
	// x = ΔT̃ - μ·(N_2i - N_2i+1) = Σσ(d-μ), whose square has expectation
	// Σ(d-μ)² - the same estimator for μ = 0, without the cancellation
	// E[d²] - μ² suffers when the mean dominates the spread.
	var num float64
	var pairN int64
	for i := 0; i+1 < len(snd.cells); i += 2 {
		s0, s1, r0, r1 := snd.cells[i], snd.cells[i+1], rcv.cells[i], rcv.cells[i+1]
		if s0.N != r0.N || s0.D != r0.D || s1.N != r1.N || s1.D != r1.D || s0.N+s1.N == 0 {
			continue
		}
		x := float64((r0.S-s0.S)-(r1.S-s1.S)) - mean*float64(s0.N-s1.N)
		num += x * x
		pairN += s0.N + s1.N
	}
	if pairN >= 2 {
		v := num / float64(pairN)
		est.Stddev = math.Sqrt(v)
		est.CI95 = z95 * math.Sqrt(v/est.Samples)
	}
	return est
}
