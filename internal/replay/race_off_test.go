//go:build !race

package replay

// raceDetector: see race_on_test.go.
const raceDetector = false
