// Package sketch holds the per-interval sketches (LDS, LDA), their wire
// encoding and sizing, and the receiver's decoding of a sketch pair into
// per-flow delay and loss estimates (docs/sketch.md, docs/decode.md).
package sketch
