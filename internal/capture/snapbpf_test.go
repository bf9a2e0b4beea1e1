package capture

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/net/bpf"
)

// TestSnapFilter runs filters and their snap-length rewrites through
// x/net/bpf's VM on frames of every length: the rewrite keeps
// min(what the filter keeps, snap) of every frame (never more than the
// frame, as the kernel does), drops what it drops, and changes nothing
// else.
func TestSnapFilter(t *testing.T) {
	const snap = 104
	programs := map[string][]bpf.Instruction{
		"none":       nil,
		"accept all": {bpf.RetConstant{Val: MaxSnaplen}},
		// ip6, as libpcap compiles it: ethertype 0x86dd or drop
		"ip6": {
			bpf.LoadAbsolute{Off: 12, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x86dd, SkipFalse: 1},
			bpf.RetConstant{Val: MaxSnaplen},
			bpf.RetConstant{Val: 0},
		},
		// keeps fewer bytes than the snap length for one ethertype
		"short accept": {
			bpf.LoadAbsolute{Off: 12, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x0800, SkipFalse: 1},
			bpf.RetConstant{Val: 60},
			bpf.RetConstant{Val: 200},
		},
		// returns the accumulator: the frame's length, or a byte of it
		"ret A": {
			bpf.LoadAbsolute{Off: 12, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x0800, SkipTrue: 2},
			bpf.LoadExtension{Num: bpf.ExtLen},
			bpf.RetA{},
			bpf.LoadAbsolute{Off: 14, Size: 1},
			bpf.RetA{},
		},
	}
	r := rand.New(rand.NewPCG(3, 4))
	var frames [][]byte
	for n := 14; n <= 1514; n += 1 + r.IntN(7) {
		f := make([]byte, n)
		for i := range f {
			f[i] = byte(r.IntN(256))
		}
		f[12], f[13] = []byte{0x08, 0x86, 0x81}[r.IntN(3)], []byte{0x00, 0xdd}[r.IntN(2)]
		frames = append(frames, f)
	}
	for name, prog := range programs {
		var raw []bpf.RawInstruction
		if prog != nil {
			var err error
			if raw, err = bpf.Assemble(prog); err != nil {
				t.Fatal(name, err)
			}
		}
		got, err := SnapFilter(raw, snap)
		if err != nil {
			t.Fatal(name, err)
		}
		ins, ok := bpf.Disassemble(got)
		if !ok {
			t.Fatalf("%s: rewritten program does not disassemble: %v", name, got)
		}
		vm, err := bpf.NewVM(ins)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var orig *bpf.VM
		if prog != nil {
			if orig, err = bpf.NewVM(prog); err != nil {
				t.Fatal(name, err)
			}
		}
		kept, cut := 0, 0
		for _, f := range frames {
			want := len(f) // no filter: every frame, whole
			if orig != nil {
				if want, err = orig.Run(f); err != nil {
					t.Fatal(name, err)
				}
			}
			want = min(want, snap, len(f))
			n, err := vm.Run(f)
			if err != nil {
				t.Fatal(name, err)
			}
			n = min(n, len(f)) // the kernel keeps at most the frame, as the VM does not
			if n != want {
				t.Errorf("%s: frame of %d bytes (ethertype %02x%02x): the rewrite keeps %d bytes, want %d", name, len(f), f[12], f[13], n, want)
			}
			if n > 0 {
				kept++
			}
			if n == snap && n < len(f) {
				cut++
			}
		}
		t.Logf("%s: %d instructions -> %d; %d of %d frames kept, %d cut to %d bytes", name, len(raw), len(got), kept, len(frames), cut, snap)
	}
}

// TestSnapFilterRefuses: a snap length of 0, a return of X (not a
// classic socket filter) and a program the kernel would refuse as too
// long are errors, not silently attached.
func TestSnapFilterRefuses(t *testing.T) {
	if _, err := SnapFilter(nil, 0); err == nil {
		t.Error("snap 0 accepted")
	}
	if _, err := SnapFilter([]bpf.RawInstruction{{Op: bpfClassRet | 0x08}}, 104); err == nil {
		t.Error("RET X accepted")
	}
	long := make([]bpf.RawInstruction, bpfMaxInsns)
	for i := range long {
		long[i] = bpf.RawInstruction{Op: bpfClassRet | bpfRvalA}
	}
	if _, err := SnapFilter(long, 104); err == nil {
		t.Errorf("a program of %d instructions plus the tail accepted", len(long))
	}
}

// FuzzSnapFilter: for any program x/net/bpf's VM runs (every 8 input
// bytes an instruction), the rewrite keeps min(what it keeps, snap) of
// any frame, within the frame.
func FuzzSnapFilter(f *testing.F) {
	seed := func(prog []bpf.Instruction) []byte {
		raw, err := bpf.Assemble(prog)
		if err != nil {
			f.Fatal(err)
		}
		var b []byte
		for _, in := range raw {
			b = append(b, byte(in.Op), byte(in.Op>>8), in.Jt, in.Jf, byte(in.K), byte(in.K>>8), byte(in.K>>16), byte(in.K>>24))
		}
		return b
	}
	f.Add(seed([]bpf.Instruction{bpf.LoadExtension{Num: bpf.ExtLen}, bpf.RetA{}}), make([]byte, 200), uint16(104))
	f.Add(seed([]bpf.Instruction{bpf.LoadAbsolute{Off: 12, Size: 2}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x86dd, SkipFalse: 1},
		bpf.RetConstant{Val: MaxSnaplen}, bpf.RetConstant{Val: 0}}), make([]byte, 1514), uint16(60))
	f.Fuzz(func(t *testing.T, code, frame []byte, snap uint16) {
		if snap == 0 || len(code) < 8 || len(code) > 8*64 {
			return
		}
		raw := make([]bpf.RawInstruction, len(code)/8)
		for i := range raw {
			c := code[8*i:]
			raw[i] = bpf.RawInstruction{Op: uint16(c[0]) | uint16(c[1])<<8, Jt: c[2], Jf: c[3],
				K: uint32(c[4]) | uint32(c[5])<<8 | uint32(c[6])<<16 | uint32(c[7])<<24}
		}
		ins, ok := bpf.Disassemble(raw)
		if !ok {
			return
		}
		orig, err := bpf.NewVM(ins)
		if err != nil {
			return // not a program the VM runs
		}
		want, err := orig.Run(frame)
		if err != nil {
			return
		}
		got, err := SnapFilter(raw, uint32(snap))
		if err != nil {
			t.Fatalf("a program the VM runs refused: %v", err)
		}
		gins, ok := bpf.Disassemble(got)
		if !ok {
			t.Fatalf("rewrite does not disassemble: %v", got)
		}
		vm, err := bpf.NewVM(gins)
		if err != nil {
			t.Fatalf("rewrite refused by the VM: %v", err)
		}
		n, err := vm.Run(frame)
		if err != nil {
			t.Fatalf("rewrite fails where the program ran: %v", err)
		}
		if min(n, len(frame)) != min(want, int(snap), len(frame)) {
			t.Fatalf("rewrite keeps %d of a %d-byte frame, the program %d, snap %d", n, len(frame), want, snap)
		}
	})
}
