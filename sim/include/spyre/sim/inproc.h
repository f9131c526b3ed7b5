// The simulator's side of the driver's transport seam: the "inproc" transport, in which the card
// model runs in a thread of this process. The driver does not link the simulator; a program that
// wants it in-process (the torch backend, spyre-sim, the driver's tests) links spyre_sim_inproc and
// calls register_inproc_transport() before the driver's first use.
#pragma once

namespace spyre::sim {

/// Makes SPYRE_TRANSPORT=inproc (the default) open the simulator of this process.
void register_inproc_transport();

}  // namespace spyre::sim
