package config

import "testing"

// TestLostFingerprint: lost.capacity is in the fingerprint exactly when
// the table is on, so that an end with it off pairs with a peer that
// predates the table and an end with it on refuses one, naming the key.
func TestLostFingerprint(t *testing.T) {
	c := DefaultCommon()
	if v, ok := c.Fingerprint()["lost.capacity"]; !ok || v != "1000 (1302 cells, format 2)" {
		t.Fatalf("default fingerprint lost.capacity = %q, %v", v, ok)
	}
	c.Lost.Capacity = 0
	if _, ok := c.Fingerprint()["lost.capacity"]; ok {
		t.Fatal("lost.capacity in the fingerprint with the table off")
	}
	c.Lost.Capacity = -1
	if err := c.Lost.Validate(); err == nil {
		t.Fatal("lost.capacity -1 accepted")
	}
}
