// Prefetch distances of the MatMul kernels, in bytes ahead of the weight
// stream: PF0 into L1 (PREFETCHT0), PF1 into L2 (PREFETCHT1). Decode is
// bound by memory bandwidth, and the hardware prefetchers alone keep too
// few lines in flight: the far prefetch into L2 is what brings a decode
// step close to the machine's read bandwidth (measured: +50% tokens/s on a
// 245M-parameter Q8_0 model), the near one hides L2 latency. Prefetches
// past the end of the weights are harmless (they never fault).
#define PF0 1024
#define PF1 8192
