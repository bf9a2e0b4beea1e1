package capture

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// Classic BPF encodings of the return instructions (linux/filter.h).
const (
	bpfClassMask = 0x07
	bpfClassRet  = 0x06
	bpfRvalMask  = 0x18
	bpfRvalK     = 0x00
	bpfRvalA     = 0x10
	// bpfMaxInsns is the longest program the kernel accepts (BPF_MAXINSNS).
	bpfMaxInsns = 4096
)

// SnapFilter returns the classic BPF program for a packet socket that
// keeps at most snap bytes of every frame user accepts (every frame when
// user is empty). A socket filter's return value is the number of bytes
// the kernel keeps, so the ring stores only those while tp_len still
// carries the frame's length: each RET k of user becomes RET min(k, snap),
// and each RET A jumps to a tail that returns min(A, snap). A return of 0
// (drop) stays 0, and no jump offset changes: the tail goes after the
// program and is reached with 32-bit jumps.
func SnapFilter(user []bpf.RawInstruction, snap uint32) ([]bpf.RawInstruction, error) {
	if snap == 0 {
		return nil, fmt.Errorf("a snap length of 0 would drop every frame")
	}
	keep, err := bpf.RetConstant{Val: snap}.Assemble()
	if err != nil {
		return nil, err
	}
	if len(user) == 0 {
		return []bpf.RawInstruction{keep}, nil
	}
	out := make([]bpf.RawInstruction, len(user), len(user)+3)
	copy(out, user)
	tail := len(user) // index of the min(A, snap) tail, added only when used
	usesA := false
	for i, in := range out {
		if in.Op&bpfClassMask != bpfClassRet {
			continue
		}
		switch in.Op & bpfRvalMask {
		case bpfRvalK:
			out[i].K = min(in.K, snap)
		case bpfRvalA:
			j, err := bpf.Jump{Skip: uint32(tail - i - 1)}.Assemble()
			if err != nil {
				return nil, err
			}
			out[i] = j
			usesA = true
		default:
			return nil, fmt.Errorf("instruction %d returns an unknown source (opcode %#x)", i, in.Op)
		}
	}
	if usesA {
		// A > snap ? snap : A
		gt, err := bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: snap, SkipTrue: 0, SkipFalse: 1}.Assemble()
		if err != nil {
			return nil, err
		}
		retA, err := bpf.RetA{}.Assemble()
		if err != nil {
			return nil, err
		}
		out = append(out, gt, keep, retA)
	}
	if len(out) > bpfMaxInsns {
		return nil, fmt.Errorf("a BPF program of %d instructions with the snap length, the kernel takes at most %d", len(out), bpfMaxInsns)
	}
	return out, nil
}
