package sample

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// Sample is one shipped packet: the top bits of its sampling value (Q =
// S >> the list's shift) and its send time relative to the interval start.
type Sample struct {
	Q        uint64
	SendTime int64
}

// List is the samples of one flow (or the link sample, Flow 0), sorted by Q.
type List struct {
	Flow    uint64
	Shift   uint8
	Samples []Sample
}

// Set is what the sender ships for one interval: the candidate limit it
// sampled under, the link sample and the flows' samples.
type Set struct {
	Limit     uint64 // the sender's candidate bound on S (after any halving)
	LinkLimit uint64 // the link sample: every candidate with S < LinkLimit (0: none)
	Link      List
	Flows     []List
}

// Samples counts the flow samples in the set (the link sample aside).
func (s *Set) Samples() int {
	n := 0
	for i := range s.Flows {
		n += len(s.Flows[i].Samples)
	}
	return n
}

// precision is how many bits each shipped sample keeps beyond what tells
// it apart from the others of its list: a receiver candidate of the same
// flow shares a sample's Q with odds ~2^-precision, and is then told apart
// by its receive time or left out (docs/sampling.md).
const precision = 12

// Select picks the samples to ship from an interval's candidates (start:
// the interval's start, Unix ns), each flow's smallest S, within
// cfg.MaxPerInterval, in this order (docs/sampling.md, "Selection"):
//   - the floor: every flow of at least cfg.MinPerFlow candidates (used
//     up to cfg.PerFlow / 2, and at least MinP50), heaviest first, gets
//     that many while the floors so given stay within half the budget:
//     enough samples for a mean delay where the flow's sketch cells are
//     all lossy;
//   - the tracked share: the cfg.MaxPerInterval / cfg.PerFlow heaviest
//     of those flows are raised to a common cap, as far as what the
//     floors leave of the budget allows (water-filling);
//   - with what is left, the next such flows are raised to up to
//     cfg.PerFlow each, heaviest first (one without a floor only where
//     MinP50 samples are left);
//   - then the flows of fewer than MinP50 candidates, whole, heaviest
//     first: they can publish no figure from their samples (each needs
//     at least MinP50 joined), only their lost samples.
//
// and the link sample. It reorders c.C. Off the packet path.
func Select(c *SenderCands, start int64, cfg Config) *Set {
	var s Selector
	return s.Select(c, start, cfg)
}

// Selector is Select with its grouping memory kept from one interval to
// the next (the sender's ship goroutine holds one): at most the largest
// merged candidate list and a 1 MiB table (GroupScratchBytes). Not safe
// for concurrent use.
type Selector struct{ g grouper }

// Select is the package's Select, on s's memory.
func (s *Selector) Select(c *SenderCands, start int64, cfg Config) *Set {
	if c == nil {
		return &Set{}
	}
	set := &Set{Limit: c.Limit}
	if ll := cfg.linkLevel(); ll > 0 {
		set.LinkLimit = min(limitOf(ll), c.Limit)
		var link []SenderCand
		for _, x := range c.C {
			if c.S(x) < set.LinkLimit {
				link = append(link, x)
			}
		}
		slices.SortFunc(link, func(a, b SenderCand) int { return cmp.Compare(a.X>>32, b.X>>32) })
		set.Link = makeList(0, c, link)
	}
	if cfg.MaxPerInterval == 0 || len(c.C) == 0 {
		return set
	}
	s.g.group(c.C)
	var runs []flowRun
	for i := 0; i < len(c.C); {
		j := i + 1
		for j < len(c.C) && c.C[j].Flow == c.C[i].Flow {
			j++
		}
		runs = append(runs, flowRun{from: i, n: j - i})
		i = j
	}
	slices.SortFunc(runs, func(a, b flowRun) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(c.C[a.from].Flow, c.C[b.from].Flow))
	})
	allocate(runs, cfg)
	for _, r := range runs {
		if r.k > 0 {
			run := c.C[r.from : r.from+r.n]
			smallest(run, r.k)
			set.Flows = append(set.Flows, makeList(run[0].Flow, c, run[:r.k]))
		}
	}
	return set
}

// groupByFlow reorders cs, in place, so that each flow's candidates are
// contiguous (in no particular order of flows or within a flow): a
// most-significant-digit radix partition on the flow hash, 8 bits at a
// time from bit shift up, each bucket of one flow left as it is. Linear
// in len(cs) for uniform flow hashes, where a sort by flow would take
// len(cs)·log len(cs) comparisons.
func groupByFlow(cs []SenderCand, shift uint) {
	if len(cs) < 2 {
		return
	}
	if len(cs) <= 24 {
		// Insertion sort by flow: few enough for it to beat a pass.
		for i := 1; i < len(cs); i++ {
			for j := i; j > 0 && cs[j].Flow < cs[j-1].Flow; j-- {
				cs[j], cs[j-1] = cs[j-1], cs[j]
			}
		}
		return
	}
	one := true
	for i := 1; i < len(cs); i++ {
		if cs[i].Flow != cs[0].Flow {
			one = false
			break
		}
	}
	if one {
		return
	}
	var cnt [256]int
	for i := range cs {
		cnt[byte(cs[i].Flow>>shift)]++
	}
	// American flag sort: next[b] is where bucket b's next element
	// goes, end[b] where the bucket ends.
	var next, end [256]int
	o := 0
	for b := range cnt {
		next[b] = o
		o += cnt[b]
		end[b] = o
	}
	for b := range next {
		for next[b] < end[b] {
			x := cs[next[b]]
			d := int(byte(x.Flow >> shift))
			for d != b {
				x, cs[next[d]] = cs[next[d]], x
				next[d]++
				d = int(byte(x.Flow >> shift))
			}
			cs[next[b]] = x
			next[b]++
		}
	}
	if shift == 0 {
		return // every bucket holds one flow
	}
	from := 0
	for b := range cnt {
		if cnt[b] > 1 {
			groupByFlow(cs[from:from+cnt[b]], shift-8)
		}
		from += cnt[b]
	}
}

// smallest moves run's k smallest candidates by X (sampling value, then
// send time: equal values, a 2^-32 chance between two candidates, go by
// send time) to run[:k], sorted: a selection (quickselect) and a sort of
// the k, where sorting the whole run would take n·log n comparisons.
func smallest(run []SenderCand, k int) {
	byX := func(a, b SenderCand) int { return cmp.Compare(a.X, b.X) }
	if k < len(run) {
		lo, hi := 0, len(run)-1 // the k-th smallest lies in run[lo:hi+1]
		for hi-lo > 16 {
			// Median of three as the pivot, then a Lomuto partition.
			mid := lo + (hi-lo)/2
			if run[mid].X < run[lo].X {
				run[mid], run[lo] = run[lo], run[mid]
			}
			if run[hi].X < run[lo].X {
				run[hi], run[lo] = run[lo], run[hi]
			}
			if run[hi].X < run[mid].X {
				run[hi], run[mid] = run[mid], run[hi]
			}
			run[mid], run[hi] = run[hi], run[mid]
			pv := run[hi].X
			p := lo
			for i := lo; i < hi; i++ {
				if run[i].X < pv {
					run[i], run[p] = run[p], run[i]
					p++
				}
			}
			run[p], run[hi] = run[hi], run[p]
			switch {
			case p == k-1 || p == k:
				lo, hi = p, p
			case p < k:
				lo = p + 1
			default:
				hi = p - 1
			}
		}
		if hi > lo {
			slices.SortFunc(run[lo:hi+1], byX)
		}
	}
	slices.SortFunc(run[:k], byX)
}

// flowRun is one flow's candidates in c.C (from, n) and how many of them
// Select ships (k).
type flowRun struct{ from, n, k int }

// allocate sets each run's k by Select's rule; runs are heaviest first.
func allocate(runs []flowRun, cfg Config) {
	// The flows too light for any figure are the tail.
	light := runs[len(runs):]
	if i := slices.IndexFunc(runs, func(r flowRun) bool { return r.n < MinP50 }); i >= 0 {
		runs, light = runs[:i], runs[i:]
	}
	left := cfg.MaxPerInterval
	if floor := min(cfg.MinPerFlow, cfg.PerFlow/2); floor > 0 {
		spend := cfg.MaxPerInterval / 2
		for i := range runs {
			if runs[i].n < floor || floor > spend {
				break
			}
			runs[i].k, spend, left = floor, spend-floor, left-floor
		}
	}
	top := runs[:min(len(runs), cfg.MaxPerInterval/max(cfg.PerFlow, 1))]
	rest := runs[len(top):]
	// The tracked share's common cap: the largest whose samples beyond
	// the floors fit in what the floors left.
	extra := func(k int) int {
		t := 0
		for _, r := range top {
			t += max(min(r.n, k)-r.k, 0)
		}
		return t
	}
	lo, hi := 0, 0
	if len(top) > 0 {
		hi = top[0].n // extra(lo) <= left
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if extra(mid) <= left {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	left -= extra(lo)
	for i := range top {
		top[i].k = max(top[i].k, min(top[i].n, lo))
	}
	for i := range rest {
		r := &rest[i]
		k := min(r.n, cfg.PerFlow, r.k+left)
		if r.k == 0 && k < MinP50 {
			break
		}
		left -= k - r.k
		r.k = k
	}
	for i := range light {
		if light[i].n > left {
			break
		}
		light[i].k = light[i].n
		left -= light[i].n
	}
}

// makeList turns candidates of c sorted by S into a list whose shift keeps
// bitlen(n)+precision bits of the largest S, and no bit the candidates do
// not hold (the shift is at least c.Drop).
func makeList(flow uint64, c *SenderCands, cs []SenderCand) List {
	l := List{Flow: flow, Samples: make([]Sample, len(cs))}
	if len(cs) == 0 {
		return l
	}
	keep := bits.Len(uint(len(cs))) + precision
	l.Shift = c.Drop
	if top := bits.Len64(c.S(cs[len(cs)-1])); top > keep {
		l.Shift = max(uint8(top-keep), c.Drop)
	}
	for i, x := range cs {
		l.Samples[i] = Sample{Q: c.S(x) >> l.Shift, SendTime: c.SendTime(x)}
	}
	return l
}

// Encoding version of MarshalBinary.
const encVersion = 2

// MarshalBinary encodes the set: version, the two limits (uvarint), then
// the link list and each flow list. A list is its 8-byte flow hash, its
// count and shift (uvarint, byte), the Rice parameter of its ΔQ and the bit
// width of its send times (bytes), then a bit stream of per sample ΔQ
// (Rice-coded) and send time (fixed width), padded to a byte.
// docs/sampling.md.
func (s *Set) MarshalBinary() ([]byte, error) {
	b := []byte{encVersion}
	b = binary.AppendUvarint(b, s.Limit)
	b = binary.AppendUvarint(b, s.LinkLimit)
	b = appendList(b, &s.Link)
	b = binary.AppendUvarint(b, uint64(len(s.Flows)))
	for i := range s.Flows {
		b = appendList(b, &s.Flows[i])
	}
	return b, nil
}

func appendList(b []byte, l *List) []byte {
	b = binary.LittleEndian.AppendUint64(b, l.Flow)
	b = binary.AppendUvarint(b, uint64(len(l.Samples)))
	var sum, maxTX uint64
	var prev uint64
	for _, x := range l.Samples {
		sum += x.Q - prev
		prev = x.Q
		maxTX = max(maxTX, uint64(x.SendTime))
	}
	k, wt := riceParam(sum, len(l.Samples)), uint(bits.Len64(maxTX))
	b = append(b, l.Shift, byte(k), byte(wt))
	w := bitWriter{b: b}
	prev = 0
	for _, x := range l.Samples {
		w.rice(x.Q-prev, k)
		w.write(uint64(x.SendTime), wt)
		prev = x.Q
	}
	return w.flush()
}

// ErrMalformed marks a blob that is not a sample set of this version.
var ErrMalformed = errors.New("sample set malformed")

// Unmarshal decodes a set, checking every count against the bits left
// (each sample takes at least one) before allocating, and that send times
// lie within [0, maxTX) (the interval length) and Q ascends.
func Unmarshal(b []byte, maxTX int64) (*Set, error) {
	d := decoder{b: b}
	if v := d.byte(); v != encVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrMalformed, v, encVersion)
	}
	s := &Set{Limit: d.uvarint(), LinkLimit: d.uvarint()}
	s.Link = d.list(maxTX)
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b))/12 {
		d.fail("%d flows in %d bytes", n, len(d.b))
	}
	if d.err == nil && n > 0 {
		s.Flows = make([]List, n)
		for i := range s.Flows {
			s.Flows[i] = d.list(maxTX)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(f string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+f, append([]any{ErrMalformed}, a...)...)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) list(maxTX int64) List {
	var l List
	if len(d.b) < 8 {
		d.fail("truncated flow hash")
		return l
	}
	l.Flow = binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	n := d.uvarint()
	l.Shift = d.byte()
	k, wt := uint(d.byte()), uint(d.byte())
	if d.err != nil {
		return l
	}
	if l.Shift > 63 || k > 63 || wt > 63 {
		d.fail("shift %d, Rice parameter %d, time width %d", l.Shift, k, wt)
		return l
	}
	if n > uint64(len(d.b))*8 {
		d.fail("%d samples in %d bytes", n, len(d.b))
		return l
	}
	l.Samples = make([]Sample, n)
	r := bitReader{b: d.b}
	var q uint64
	for i := range l.Samples {
		dq := r.rice(k)
		tx := r.read(wt)
		if r.bad {
			d.fail("truncated samples")
			return l
		}
		if q+dq < q || l.Shift > 0 && (q+dq)>>(64-l.Shift) != 0 {
			d.fail("sample value overflows")
			return l
		}
		q += dq
		if tx >= uint64(maxTX) {
			d.fail("send time %d ns outside the interval (%d ns)", tx, maxTX)
			return l
		}
		l.Samples[i] = Sample{Q: q, SendTime: int64(tx)}
	}
	d.b = d.b[(r.pos+7)/8:]
	return l
}
