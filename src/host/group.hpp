// Shared group: the processes of one node that share a table -- one leader (rank 0) and N peers. Three
// parts, one header each: the channel (host/group_channel.hpp: collectives over any transport, ours over
// AF_UNIX), the wire codec (host/group_wire.hpp: the messages as bytes, decoded without trusting the
// sender) and the shared-table protocol (host/group_protocol.hpp: the steps every rank runs). This
// header brings all three for the code that uses a group as a whole.
#pragma once

#include "host/group_channel.hpp"  // IWYU pragma: export
#include "host/group_protocol.hpp"  // IWYU pragma: export
#include "host/group_wire.hpp"  // IWYU pragma: export
