#include "tandem/layout/groups.h"

#include "tandem/comm/stand_in.h"
#include "tandem/core/error.h"

namespace tandem::layout {

Groups make_groups(comm::mpi::MpiWorld& world, const Layout& layout) {
  TANDEM_CHECK(world.size() == layout.world(), "layout ", layout.str(), " on ", world.size(), " ranks");
  Groups g;
  g.layout = layout;
  g.rank = world.rank();
  g.coord = coord_of(layout, g.rank);
  const Coord c = g.coord;
  const std::string at_dp = "dp=" + std::to_string(c.dp), at_pp = "pp=" + std::to_string(c.pp),
                    at_tp = "tp=" + std::to_string(c.tp),
                    at_cp = layout.cp > 1 ? ",cp=" + std::to_string(c.cp) : std::string();
  // Colors: the coordinates the members share, flattened; keys: the coordinate along the axis.
  const int L = layout.cp;
  g.world = world.world();
  g.tp = world.split((c.dp * layout.pp + c.pp) * L + c.cp, c.tp, "tp(" + at_dp + "," + at_pp + at_cp + ")");
  g.cp =
      world.split((c.dp * layout.pp + c.pp) * layout.tp + c.tp, c.cp, "cp(" + at_dp + "," + at_pp + "," + at_tp + ")");
  g.pp = world.split((c.dp * layout.tp + c.tp) * L + c.cp, c.pp, "pp(" + at_dp + "," + at_tp + at_cp + ")");
  g.dp = world.split(c.pp * layout.tp + c.tp, replica_of(layout, c), "dp(" + at_pp + "," + at_tp + ")");
  const bool end_stage = layout.pp > 1 && (c.pp == 0 || c.pp == layout.pp - 1);
  g.tied = world.split(end_stage ? (c.dp * layout.tp + c.tp) * L + c.cp : -1, c.pp,
                       "tied(" + at_dp + "," + at_tp + at_cp + ")");
  if (layout.ep > 1) {
    const int slot = expert_slot_of(layout, c), group = expert_replica_of(layout, c);
    g.ep = world.split((group * layout.pp + c.pp) * layout.tp + c.tp, slot,
                       "ep(" + at_pp + "," + at_tp + ",expert group=" + std::to_string(group) + ")");
    g.edp = world.split((slot * layout.pp + c.pp) * layout.tp + c.tp, group,
                        "edp(" + at_pp + "," + at_tp + ",expert slot=" + std::to_string(slot) + ")");
  }
  return g;
}

Groups make_stand_in_groups(const Layout& l, int rank) {
  using device::CommAxis;
  Groups g;
  g.layout = l;
  g.coord = coord_of(l, rank);
  g.rank = rank;
  g.world = std::make_unique<comm::StandInCommunicator>("world", CommAxis::World, rank, l.world());
  g.dp = std::make_unique<comm::StandInCommunicator>("dp", CommAxis::Dp, replica_of(l, g.coord), l.replicas());
  g.cp = std::make_unique<comm::StandInCommunicator>("cp", CommAxis::Cp, g.coord.cp, l.cp);
  g.pp = std::make_unique<comm::StandInCommunicator>("pp", CommAxis::Pp, g.coord.pp, l.pp);
  g.tp = std::make_unique<comm::StandInCommunicator>("tp", CommAxis::Tp, g.coord.tp, l.tp);
  if (l.pp > 1 && (g.coord.pp == 0 || g.coord.pp == l.pp - 1))
    g.tied = std::make_unique<comm::StandInCommunicator>("tied", CommAxis::Pp, g.coord.pp == 0 ? 0 : 1, 2);
  if (l.ep > 1) {  // both inside the dp group, and counted as its traffic
    g.ep = std::make_unique<comm::StandInCommunicator>("ep", CommAxis::Dp, expert_slot_of(l, g.coord), l.ep);
    g.edp = std::make_unique<comm::StandInCommunicator>("edp", CommAxis::Dp, expert_replica_of(l, g.coord),
                                                        l.expert_replicas());
  }
  return g;
}

Groups make_single_process_groups() {
  Groups g;
  g.world = std::make_unique<comm::SelfCommunicator>("world");
  g.dp = std::make_unique<comm::SelfCommunicator>("dp");
  g.pp = std::make_unique<comm::SelfCommunicator>("pp");
  g.tp = std::make_unique<comm::SelfCommunicator>("tp");
  g.cp = std::make_unique<comm::SelfCommunicator>("cp");
  return g;
}

}  // namespace tandem::layout
