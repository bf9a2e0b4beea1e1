package config

import (
	"fmt"
	"strconv"

	"github.com/lds-net/lds/internal/sketch"
)

// Lost is the `lost:` section: the table of packet identities both ends
// keep per interval, whose difference lists the lost packets and makes
// per-flow loss exact (docs/results.md, "Lost packets").
type Lost struct {
	// Capacity is how many lost (or extra) packets an interval's table
	// lists with high probability; beyond it the list is incomplete and
	// loss stays an estimate. 0 turns the table off. Both ends must agree
	// (fingerprint key lost.capacity).
	Capacity int `yaml:"capacity"`
}

// DefaultLost holds 1 % loss at 100 kpps in 1 s intervals.
func DefaultLost() Lost { return Lost{Capacity: 1000} }

// maxLostCapacity keeps the table within sketch.MaxIBLTCells.
const maxLostCapacity = sketch.MaxIBLTCells * 10 / 13

// Validate names the key.
func (l Lost) Validate() error {
	if l.Capacity < 0 || l.Capacity > maxLostCapacity {
		return fmt.Errorf("lost.capacity: %d must be in [0, %d] (0 turns the lost-packet table off)", l.Capacity, maxLostCapacity)
	}
	return nil
}

// Cells is the table's size in cells (0: off).
func (l Lost) Cells() int { return sketch.IBLTCells(l.Capacity) }

// fingerprint adds lost.capacity when the table is on, so that a peer
// built before the table existed (or with it off) pairs with an end that
// has it off, and is refused, naming the key, by one that has it on. The
// value names the table's format: a peer whose cells hold every identity
// field (format 1, no second round) is refused at Hello, both values
// shown, rather than sending tables the other cannot read.
func (l Lost) fingerprint(f map[string]string) {
	if l.Capacity > 0 {
		f["lost.capacity"] = strconv.Itoa(l.Capacity) + " (" + strconv.Itoa(l.Cells()) + " cells, format " + strconv.Itoa(sketch.IBLTFormat) + ")"
	}
}
