// Package prefetch asks the processor to bring memory into its caches
// ahead of use: a software prefetch (PREFETCHT0 on amd64, PRFM PLDL1KEEP
// on arm64) does not wait for the line and never faults, so a loop can
// request the cells of the packets it will update next while it updates
// the current ones. Go has no prefetch a package outside the runtime can
// call, hence the few lines of assembly; other architectures do nothing.
package prefetch

// Lines prefetches the cache line of every address (any value: an address
// outside the process is ignored by the processor). It costs one call for
// the whole list.
func Lines(addrs []uintptr) {
	if len(addrs) > 0 {
		lines(addrs)
	}
}
