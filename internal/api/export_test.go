package api

import "math"

// NewStore returns a Store keeping keep intervals per sender (at least 1)
// without a cap on records, for the tests.
func NewStore(keep int) *Store { return NewBoundedStore(keep, math.MaxInt) }
