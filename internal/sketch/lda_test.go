package sketch

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestLDAFig2 is the LDA paper's Fig. 2: one bank of four pairs, one loss in
// the second: (60 + 22 + 8) / (5 + 2 + 1) = 11.25.
func TestLDAFig2(t *testing.T) {
	p := LDAParams{Banks: 1, Cells: 4}
	snd, _ := NewLDA(p)
	rcv, _ := NewLDA(p)
	sndCells := []LDACell{{120, 5, 1}, {234, 10, 2}, {15, 2, 3}, {6, 1, 4}}
	rcvCells := []LDACell{{180, 5, 1}, {348, 9, 2}, {37, 2, 3}, {14, 1, 4}}
	copy(snd.cells, sndCells)
	copy(rcv.cells, rcvCells)
	e := EstimateLDA(snd, rcv)
	if e.Delay != 11.25 || e.Samples != 8 {
		t.Fatalf("delay %v samples %v, want 11.25 and 8", e.Delay, e.Samples)
	}
	if e.Sent != 18 || e.Received != 17 || e.Lost != 1 || math.Abs(e.LossRatio-1.0/18) > 1e-15 {
		t.Fatalf("totals %d/%d lost %d ratio %v, want 18/17, 1, 1/18", e.Sent, e.Received, e.Lost, e.LossRatio)
	}
}

func TestLDAParamsValidate(t *testing.T) {
	for _, c := range []struct {
		p   LDAParams
		key string
	}{
		{DefaultLDAParams(), ""},
		{LDAParams{Banks: 0, Cells: 4}, "lda.banks"},
		{LDAParams{Banks: 33, Cells: 4}, "lda.banks"},
		{LDAParams{Banks: 1, Cells: 3}, "lda.cells"},
		{LDAParams{Banks: 1, Cells: 0}, "lda.cells"},
	} {
		err := c.p.Validate()
		if (c.key == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.key)) {
			t.Errorf("%+v: error %v, want one naming %q", c.p, err, c.key)
		}
	}
	p := LDAParams{Banks: 4, Cells: 2}
	if p.BankRate(0) != 0.5 || p.BankRate(2) != 0.125 || p.BankRate(3) != 0.125 {
		t.Errorf("bank rates %v %v %v", p.BankRate(0), p.BankRate(2), p.BankRate(3))
	}
}

// TestLDASimulated: delays with a large constant part (1 ms propagation)
// plus Weibull(shape 0.7) queueing, 0.5 % loss. Totals and loss are exact;
// mean and standard deviation close to the truth over received packets.
func TestLDASimulated(t *testing.T) {
	n := 200000
	if testing.Short() {
		n = 60000
	}
	rng := rand.New(rand.NewPCG(21, 22))
	p := DefaultLDAParams()
	snd, _ := NewLDA(p)
	rcv, _ := NewLDA(p)
	var sent, recv uint64
	var sum, sum2 float64
	banks := make([]int, p.Banks)
	for i := 0; i < n; i++ {
		h := rng.Uint64()
		ts := rng.Int64N(1e9)
		q := 2e5 * math.Pow(-math.Log(1-rng.Float64()), 1/0.7)
		d := int64(1e6 + q)
		snd.Update(h, ts)
		sent++
		if rng.Float64() < 0.005 {
			continue
		}
		rcv.Update(h, ts+d)
		recv++
		sum += float64(d)
		sum2 += float64(d) * float64(d)
	}
	for b := 0; b < p.Banks; b++ {
		for i := 0; i < p.Cells; i++ {
			banks[b] += int(snd.Cell(b, i).N)
		}
	}
	for b, c := range banks {
		got, want := float64(c)/float64(n), p.BankRate(b)
		if math.Abs(got-want) > 5*math.Sqrt(want/float64(n)) {
			t.Errorf("bank %d got %.4f of packets, want %.4f", b, got, want)
		}
	}
	mean := sum / float64(recv)
	sd := math.Sqrt(sum2/float64(recv) - mean*mean)
	e := EstimateLDA(snd, rcv)
	t.Logf("LDA: %d sent %d received; delay %.1f (true %.1f) stddev %.1f (true %.1f) ci95 %.1f samples %.0f",
		sent, recv, e.Delay, mean, e.Stddev, sd, e.CI95, e.Samples)
	if e.Sent != sent || e.Received != recv || e.Lost != int64(sent-recv) {
		t.Fatalf("totals %d/%d/%d, want %d/%d/%d", e.Sent, e.Received, e.Lost, sent, recv, sent-recv)
	}
	if math.Abs(e.Delay-mean) > 3*e.CI95 || math.Abs(e.Delay-mean)/mean > 0.01 {
		t.Errorf("delay %v, true %v (ci95 %v)", e.Delay, mean, e.CI95)
	}
	if math.Abs(e.Stddev-sd)/sd > 0.1 {
		t.Errorf("stddev %v, true %v: more than 10%% off", e.Stddev, sd)
	}
}

func TestLDAMergeEncode(t *testing.T) {
	p := LDAParams{Banks: 3, Cells: 64}
	rng := rand.New(rand.NewPCG(23, 24))
	one, _ := NewLDA(p)
	w := []*LDA{}
	for i := 0; i < 4; i++ {
		x, _ := NewLDA(p)
		w = append(w, x)
	}
	for i := 0; i < 5000; i++ {
		h, ts := rng.Uint64(), rng.Int64N(1e9)
		one.Update(h, ts)
		w[rng.IntN(4)].Update(h, ts)
	}
	m, _ := NewLDA(p)
	for _, x := range w {
		if err := m.Merge(x); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Equal(one) {
		t.Fatal("merged LDAs differ from one over all packets")
	}
	b, _ := one.MarshalBinary()
	back, err := UnmarshalLDA(b, p)
	if err != nil || !back.Equal(one) {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := UnmarshalLDA(b, LDAParams{Banks: p.Banks, Cells: p.Cells / 2}); err == nil || !strings.Contains(err.Error(), "agreed") {
		t.Fatalf("accepted an aggregator of other dimensions than the agreed ones: %v", err)
	}
	other, _ := NewLDA(LDAParams{Banks: 2, Cells: 64})
	if m.Merge(other) == nil {
		t.Fatal("merged different parameters")
	}
	m.Reset()
	empty, _ := NewLDA(p)
	if !m.Equal(empty) {
		t.Fatal("Reset left data")
	}
	eb, _ := empty.MarshalBinary()
	if len(eb) > 10 {
		t.Errorf("empty LDA encodes to %d bytes", len(eb))
	}
}

// FuzzUnmarshalLDA: as FuzzUnmarshalLDS, for the aggregator.
func FuzzUnmarshalLDA(f *testing.F) {
	agreed := LDAParams{Banks: 2, Cells: 8}
	a, _ := NewLDA(agreed)
	for i := uint64(0); i < 20; i++ {
		a.Update(i*0x9e3779b97f4a7c15, int64(i)*1000)
	}
	b, _ := a.MarshalBinary()
	f.Add(b)
	f.Add([]byte("LDAk\x02\x20\x80\x80\x40\x00"))
	f.Add(hostileLDAHeader())
	f.Add([]byte{})
	base := allocBytes(func() { _, _ = NewLDA(agreed) })
	f.Fuzz(func(t *testing.T, data []byte) {
		var x *LDA
		var err error
		got := allocBytes(func() { x, err = UnmarshalLDA(data, agreed) })
		if limit := decodeAllowance(base, len(data)); got > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes, more than the agreed aggregator allows (%d)", len(data), got, limit)
		}
		if err != nil {
			return
		}
		if x.Params() != agreed {
			t.Fatalf("decoded %+v, agreed %+v", x.Params(), agreed)
		}
		again, err := x.MarshalBinary()
		if err != nil || string(again) != string(data) {
			// The encoding is canonical up to varint padding.
			y, err := UnmarshalLDA(again, agreed)
			if err != nil || !y.Equal(x) {
				t.Fatalf("re-encoding does not round-trip: %v", err)
			}
		}
	})
}
