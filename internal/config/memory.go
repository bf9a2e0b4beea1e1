package config

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"strings"
	"unsafe"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sketch"
)

// Sizes behind the memory bound (docs/PERFORMANCE.md, "Memory"), in bytes.
// Where the type is at hand its size is taken from it; the others are
// upper bounds of the structures that hold them, named where they live.
const (
	// flowTableBytes is one tracked flow in interval.FlowTable: its
	// FlowStat (88 B) with the slice's append growth up to 2×, and 2 to
	// 4 open-addressing slots of 16 B (load between 1/4 and 1/2). The
	// composition counters (4·R·k B) come on top.
	flowTableBytes = 2*88 + 4*16
	// recordBytes is one published flow record: results.FlowRecord (its
	// size from the type, the flow key inline) and up to eight float
	// pointers (8 B each from the runtime's tiny allocator: delay, stddev,
	// ci95, loss, loss_point, loss_bound, bytes, clock error). The six
	// pointers from packet samples (p50, p90, p99, p99_low, reordered,
	// reorder extent) exist only for flows with samples, at most
	// sample.max_per_interval / 10 an interval: not counted.
	recordBytes = int64(unsafe.Sizeof(results.FlowRecord{})) + 8*8
	// candBytes is one packet-sample candidate at the receiver
	// (sample.ReceiverCand), senderCandBytes one at the sender (sample.SenderCand), and
	// sampleBytes one shipped sample held decoded (sample.Sample).
	candBytes       = int64(unsafe.Sizeof(sample.ReceiverCand{}))
	senderCandBytes = int64(unsafe.Sizeof(sample.SenderCand{}))
	sampleBytes     = int64(unsafe.Sizeof(sample.Sample{}))
	// estimatePaperBytes and estimateDecodeBytes are one candidate flow's
	// working memory during estimation: keys, hashes, compositions and
	// estimates (paper); decode adds its solver state (docs/decode.md;
	// `go test -bench EstimateDecode -benchmem ./internal/sketch/`
	// allocates 132 MB in all for 150k flows, ~880 B a flow).
	estimatePaperBytes  = 256
	estimateDecodeBytes = 1024
	// heavySlotBytes is one slot of the sender's heavy-flow table (16 B
	// slot plus its 56 B key, at load 1/4) and heavyKeyBytes one ranked key.
	heavySlotBytes = 4 * (16 + 56)
	heavyKeyBytes  = 64
	// boundaryKeyBytes is one packet at a boundary at the sender: its
	// (hash, time) record in the boundary log, or its (hash, offset) key
	// of a finished interval (16 B each).
	boundaryKeyBytes = 16
	// logSlackBytes is the records the boundary log keeps before the
	// earliest key window (interval.logSlack, 4096 records of 16 B), and
	// logChunkBytes one chunk of its storage (interval.logChunk records).
	logSlackBytes = 4096 * boundaryKeyBytes
	logChunkBytes = 1 << 14 * boundaryKeyBytes
	// spikeFlowBytes is one baseline of the spike detector.
	spikeFlowBytes = 512
	// resultsBufferBytes is the results file writer's buffer: a chunk of
	// whole lines (api.writeChunk) and the line that passed it.
	resultsBufferBytes = 4<<20 + 64<<10
	// RuntimeBaseBytes is the daemon's memory before any interval: the
	// binary, the Go runtime, gRPC, the HTTP server and their buffers.
	RuntimeBaseBytes = 64 << 20
)

// MemoryInput is what the bound needs beyond the configuration.
type MemoryInput struct {
	// PPS is the highest packet rate at the tap. Only the packets held
	// at interval boundaries follow it: rate × (max_delay + guard) a
	// boundary at the receiver, twice that at the sender. Everything else
	// is bounded by configuration.
	PPS float64
	// Replay: the receiver's pipeline as `ldsctl replay` runs it
	// (estimating Procs intervals at once); otherwise the live daemon (one).
	Replay bool
	Procs  int
}

// MemoryTerm is one part of a bound: N items of Each bytes.
type MemoryTerm struct {
	What string
	N    int64
	Each int64
}

// Bytes is the term's total.
func (t MemoryTerm) Bytes() int64 { return t.N * t.Each }

// MemoryBound is a daemon's worst-case memory: the live heap is at most
// Live; with the Go collector's default GOGC=100 the heap may reach twice
// the live data before it is collected, so the resident set stays under
// Peak = RuntimeBaseBytes + 2 × Live.
type MemoryBound struct {
	Terms []MemoryTerm
	Live  int64
	Peak  int64
}

func newBound(terms []MemoryTerm) MemoryBound {
	b := MemoryBound{Terms: terms}
	for _, t := range terms {
		b.Live += t.Bytes()
	}
	b.Peak = RuntimeBaseBytes + 2*b.Live
	return b
}

// sketchBytes is one interval's LDS and LDA sketches and its lost-packet
// table (lost.capacity).
func (c *Common) sketchBytes() int64 {
	cell := int64(unsafe.Sizeof(sketch.Cell{}))
	if c.Sketch.Bytes {
		cell += 8
	}
	classes := int64(len(c.Capture.Classes) + 1)
	lds := int64(c.Sketch.Rows) * int64(c.Sketch.Columns) * cell
	lda := classes * int64(c.LDA.Banks) * int64(c.LDA.Cells) * int64(unsafe.Sizeof(sketch.LDACell{}))
	return lds + lda + sketch.IBLTBytes(c.Lost.Cells())
}

// packetLogBytes is one interval's packet log (interval.PacketLog), kept
// with the lost-packet table: 24 B a packet in chunks of 16,384 (one more
// chunk), and a 40 B flow key a packet at worst (each flow's key is kept
// once while its slot or cache entry holds it; traffic of many more flows
// than the cache, at the receiver 4096 entries, keeps one a packet).
// 0 without the table.
func (c *Common) packetLogBytes(pps float64) int64 {
	if c.Lost.Capacity == 0 {
		return 0
	}
	n := int64(math.Ceil(pps * c.Interval.Seconds()))
	return n*(24+40) + (1<<14)*24
}

// lostLogIntervals is how many shipped intervals' packet logs the sender
// keeps for the receiver's question (sender.LostLogIntervals).
func (c *Common) lostLogIntervals() int64 {
	t := c.Interval.Nanoseconds()
	if t <= 0 {
		return 0
	}
	return 3 + (c.MaxDelay.Nanoseconds()+2*c.Guard.Nanoseconds()+t-1)/t
}

// boundaryPackets is the packets within the hold window of one boundary
// at rate pps: the receiver's window grows with the delays it sees, up to
// max_delay.
func (c *Common) boundaryPackets(pps float64) int64 {
	return int64(math.Ceil(pps * (c.MaxDelay + c.Guard).Seconds()))
}

// sampleCands is one capture worker's packet-sample candidates of one
// interval: the tap's packets of an interval that pass sample.one_in, at
// most sample.max_candidates.
func (c *Common) sampleCands(pps float64) int64 {
	n := int64(math.Ceil(pps * c.Interval.Seconds() / float64(max(1, c.Sample.OneIn))))
	return min(n, int64(c.Sample.MaxCandidates))
}

// sampleSet is one interval's shipped samples held decoded: the flow
// samples and the link sample.
func (c *Common) sampleSet(pps float64) int64 {
	link := int64(0)
	if c.Sample.LinkOneIn > 0 {
		link = int64(math.Ceil(pps * c.Interval.Seconds() / float64(c.Sample.LinkOneIn)))
	}
	return (int64(c.Sample.MaxPerInterval) + link) * sampleBytes
}

// boundaryKeys is the packets of one boundary's key window at the sender
// (its function's keys): sent within max_delay + 2·guard before it and
// max_delay + guard after it.
func (c *Common) boundaryKeys(pps float64) int64 {
	return int64(math.Ceil(pps * (2*c.MaxDelay + 3*c.Guard).Seconds()))
}

// boundaryClass is the largest number of intervals before a boundary a
// held packet can come from (interval.Params.maxClass).
func (c *Common) boundaryClass() int64 {
	if c.Interval <= 0 {
		return 1
	}
	return max(1, int64((c.MaxDelay+2*c.Guard+c.Interval-1)/c.Interval))
}

// functionBytes is one boundary function's encoding: ~1.25 bits a key and
// value bit (internal/retrieval).
func (c *Common) functionBytes(pps float64) int64 {
	width := int64(bits.Len64(uint64(c.boundaryClass())))
	return c.boundaryKeys(pps)*width*5/32 + 64
}

// MemoryBound is the receiver's worst-case memory (docs/PERFORMANCE.md,
// "Memory"). Every receiver interval in flight holds the sketches, a flow
// table of up to sketch.max_flows flows and its boundary's held packets;
// they sit in the capture workers (two open each), the sealed queue,
// the matcher (at most max_pending, and live no more than lateness
// allows), and the estimation pipeline.
func (c *Receiver) MemoryBound(in MemoryInput) MemoryBound {
	r := c.Receiver
	senders := int64(max(1, len(r.Senders)))
	workers := int64(c.Capture.Source.Workers)
	conc := int64(1)
	if in.Replay {
		conc = int64(max(1, in.Procs))
	}
	maxFlows := int64(c.Sketch.MaxFlows)
	// A receiver interval holds its packet log with its sketches.
	sk := c.sketchBytes() + c.packetLogBytes(in.PPS)
	held := c.boundaryPackets(in.PPS) * int64(unsafe.Sizeof(capture.Packet{}))
	table := maxFlows * (flowTableBytes + 4*int64(c.Sketch.Rows*c.Sketch.VLDA))
	// Intervals waiting for the sender: one sealed a T live, given up
	// after lateness; max_pending in any case.
	waitReceiver := int64(r.MaxPending)
	if !in.Replay {
		waitReceiver = min(waitReceiver, int64(math.Ceil(float64(r.Lateness)/float64(c.Interval)))+2)
	}
	// The estimation pipeline: conc intervals estimated (queued for
	// publishing in order), one being published, one being handed in.
	jobs := conc + 2
	est := int64(estimatePaperBytes)
	if c.Sketch.Estimator == "decode" {
		est = estimateDecodeBytes
	}
	// A complete lost-packet list repairs copies of both ends' sketches
	// (internal/receiver/repair.go): 2·sk bounds them.
	lostOn := int64(0)
	if c.Lost.Capacity > 0 {
		lostOn = 1
	}
	heavy := int64(c.Sketch.Heavy)
	senderIv := c.sketchBytes() + heavy*heavyKeyBytes + c.functionBytes(in.PPS) + c.sampleSet(in.PPS)
	// Sample pieces wait for their two joins: live at most lateness /
	// interval + 8 of them, a replay 4 × max_pending (receiver.pieceKeep),
	// plus two open per worker.
	pieces := int64(math.Ceil(float64(r.Lateness)/float64(c.Interval))) + 8
	if in.Replay {
		pieces = max(4*int64(r.MaxPending), int64(r.SealedQueue)+8)
	}
	stored := max(int64(r.APIMaxRecords), maxFlows)
	return newBound([]MemoryTerm{
		{"receiver intervals open in the capture workers (2 per worker per sender)", senders * workers * 2, sk + table},
		{"packets held at the boundaries in progress (max_delay + guard of traffic each, class + 1 per worker per sender)",
			senders * workers * (c.boundaryClass() + 1), held},
		{"sealed intervals queued for matching (receiver.sealed_queue + 1 per worker), each with its boundary's held packets", senders * (int64(r.SealedQueue) + workers), sk + table + held},
		{"worker parts waiting to be merged", senders * (workers - 1), sk + table + held},
		{"receiver intervals waiting for their sender (min(max_pending, lateness/interval + 2) live)", senders * waitReceiver, sk + table + held},
		{"sender intervals waiting for the receiver's (max_pending)", senders * int64(r.MaxPending), senderIv},
		{"sketch frames being assembled (max_sketch_bytes per stream)", senders, int64(r.MaxSketchBytes)},
		{"matched intervals in estimation and publishing", senders * jobs, c.sketchBytes() + sk + table},
		{"candidate flows being estimated (sketch.max_flows, " + c.Sketch.Estimator + ")", senders * conc * maxFlows, est},
		{"sketch copies the lost-packet list repairs, one pair per interval being estimated (lost.capacity > 0)", senders * conc * lostOn, 2 * sk},
		{"flow records estimated, not yet stored", senders * (conc + 1) * maxFlows, recordBytes},
		{"flow records in the API store (max(api_max_records, max_flows))", stored, recordBytes},
		{"spike baselines (spike.max_flows)", int64(c.Spike.MaxFlows), spikeFlowBytes},
		{"results file write buffer (whole lines, 4 MiB)", 1, resultsBufferBytes},
		{"packet-sample candidates (pieces waiting for their joins, 2 open per worker; sample.one_in, sample.max_candidates)", senders * (pieces + 2*workers) * workers, c.sampleCands(in.PPS) * candBytes},
	})
}

// MemoryBound is the sender's worst-case memory: intervals open in the
// capture workers, finished ones queued for encoding, and the encoded
// ones kept until acknowledged (sender.resend_buffer).
func (c *Sender) MemoryBound(in MemoryInput) MemoryBound {
	workers := int64(c.Capture.Source.Workers)
	heavy := int64(c.Sketch.Heavy)
	// An encoded interval is never larger than the one it encodes.
	sk := c.sketchBytes() + heavy*heavyKeyBytes + c.sampleSet(in.PPS)
	keys := c.boundaryKeys(in.PPS) * boundaryKeyBytes
	// A key buffer is sized to the log records in reach of its window:
	// its keys and the log's slack on either side.
	keyBuf := keys + 2*logSlackBytes
	// An interval waits for its end boundary's window (at most max_delay
	// + guard); with max_delay above the interval, several do.
	open := 2 + c.boundaryClass()
	plog := c.packetLogBytes(in.PPS)
	return newBound([]MemoryTerm{
		{"packet logs of the lost-packet table (every packet: 24 B, and a 40 B flow key a packet at worst; the intervals open or waiting per worker, those queued, and the shipped ones kept for the receiver's question)",
			workers*open + 8 + 2*workers + c.lostLogIntervals(), plog},
		{"packet-sample candidates (the open interval and 2 finished per worker, pooled)", workers * 3, c.sampleCands(in.PPS) * senderCandBytes},
		{"packet-sample selection on the ship goroutine (a copy of one interval's candidates of every worker, and its flow table)", 1, workers*c.sampleCands(in.PPS)*senderCandBytes + sample.GroupScratchBytes},
		{"intervals open or waiting for their boundary window in the capture workers (2 + class per worker)", workers * open, sk},
		{"boundary log of the capture workers (2·max_delay + 3·guard of traffic, 16 B a packet, with 4096 packets of slack, in chunks of 16,384: one more)", workers, keys + logSlackBytes + logChunkBytes},
		{"boundary-key storage kept for reuse (1 per worker)", workers, keyBuf},
		{"heavy-flow tables (sketch.heavy per worker)", workers * heavy, heavySlotBytes},
		{"finished intervals queued for encoding (8 + 1 per worker) and merging, with their boundary keys", 8 + 2*workers, sk + keyBuf},
		{"encoded intervals kept until acknowledged (sender.resend_buffer), with their boundary function", int64(c.Sender.ResendBuffer), sk + c.functionBytes(in.PPS)},
	})
}

// WriteMemoryBound prints b as a table.
func WriteMemoryBound(w io.Writer, name string, b MemoryBound) {
	fmt.Fprintf(w, "%s worst-case memory:\n", name)
	for _, t := range b.Terms {
		fmt.Fprintf(w, "  %10s  %d × %s  %s\n", mib(t.Bytes()), t.N, mib(t.Each), t.What)
	}
	fmt.Fprintf(w, "  %10s  live (sum)\n  %10s  peak resident: %s + 2 × live (GOGC=100)\n", mib(b.Live), mib(b.Peak), mib(RuntimeBaseBytes))
}

func mib(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(b)/(1<<20)), ".0") + " MiB"
}
