//! Test and benchmark tooling: the reference broker, its TCP face, the simulator.
