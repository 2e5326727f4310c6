// Choosing and placing the drawn part of the cluster graph; utilisation colours.
#include "gui/models/topology_graph.h"

#include <algorithm>
#include <boost/range/iterator_range.hpp>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include "gui/models/plan_inputs.h"

namespace foresight::gui {

int TopologyDrawing::count(VertexKind k) const {
  return static_cast<int>(
      std::count_if(vertices.begin(), vertices.end(), [k](const DrawnVertex& v) { return v.kind == k; }));
}

namespace {

// The short label drawn inside a vertex.
std::string short_label(const TopoVertex& v, const ClusterSpec& c) {
  const auto slash = v.name.find('/');
  switch (v.kind) {
    case VertexKind::kDevice:
      return v.name.substr(4);  // "rank12" -> "12"
    case VertexKind::kNodeSwitch:
      return c.node.fabric.kind.empty() ? "switch" : c.node.fabric.kind;
    case VertexKind::kNic:
      return slash == std::string::npos ? v.name : v.name.substr(slash + 1);
    case VertexKind::kSwitch: {
      if (v.node >= 0) return "router";
      // "tier1/group0/rail2" -> "g0 r2"
      std::string out;
      for (std::size_t at = slash; at != std::string::npos; at = v.name.find('/', at + 1)) {
        const std::size_t end = v.name.find('/', at + 1);
        const std::string part =
            v.name.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
        for (std::string_view prefix : {"group", "rail"}) {
          if (part.rfind(prefix, 0) != 0) continue;
          if (!out.empty()) out += ' ';
          out += prefix.front();
          out.append(part, prefix.size());
        }
      }
      return out.empty() ? v.name : out;
    }
  }
  return v.name;
}

// Evenly spaced centres of `n` items over [x0, x1].
double spread(int i, int n, double x0, double x1) { return x0 + (x1 - x0) * (i + 0.5) / std::max(1, n); }

// A reported link resolved to its graph vertices.
struct Reported {
  int from, to;
  const LinkUse* use;
};

// The census of the whole graph: totals per vertex kind, switches per tier and the tiers' names.
// Returns the number of switch tiers; fills `by_name` (vertex name -> vertex).
int count_graph(const TopoGraph& g, const ClusterSpec& cluster, TopologyDrawing& d,
                std::unordered_map<std::string, int>& by_name) {
  const int nv = static_cast<int>(boost::num_vertices(g));
  int tiers = 0;
  for (int v = 0; v < nv; ++v) {
    const TopoVertex& tv = g[v];
    by_name.emplace(tv.name, v);
    switch (tv.kind) {
      case VertexKind::kDevice:
        ++d.total_devices;
        break;
      case VertexKind::kNodeSwitch:
        ++d.total_node_switches;
        break;
      case VertexKind::kNic:
        ++d.total_nics;
        break;
      case VertexKind::kSwitch:
        ++d.total_switches;
        tiers = std::max(tiers, tv.tier + 1);
        break;
    }
  }
  d.switches_per_tier.assign(tiers, 0);
  for (int v = 0; v < nv; ++v)
    if (g[v].kind == VertexKind::kSwitch) ++d.switches_per_tier[g[v].tier];
  for (int t = 0; t < tiers; ++t)
    d.tier_names.push_back(t < static_cast<int>(cluster.tiers.size()) && !cluster.tiers[t].name.empty()
                               ? cluster.tiers[t].name
                               : "tier " + std::to_string(t));
  return tiers;
}

// The reported links ("a->b"), resolved to vertex pairs; a name not in the graph is an error.
Result<std::vector<Reported>> resolve_reported(const std::vector<LinkUse>& busiest,
                                               const std::unordered_map<std::string, int>& by_name,
                                               const ClusterSpec& cluster, int nodes) {
  std::vector<Reported> reported;
  for (const LinkUse& u : busiest) {
    const auto arrow = u.name.find("->");
    const auto from = arrow == std::string::npos ? by_name.end() : by_name.find(u.name.substr(0, arrow));
    const auto to = arrow == std::string::npos ? by_name.end() : by_name.find(u.name.substr(arrow + 2));
    if (from == by_name.end() || to == by_name.end())
      return Error("link \"" + u.name + "\": not a link of cluster " + cluster.name + " (" +
                   std::to_string(nodes) + " nodes); was it simulated on another cluster?");
    reported.push_back({from->second, to->second, &u});
  }
  return reported;
}

// Nodes: those the busiest links touch (busiest first), then the lowest-numbered, in number order.
std::vector<int> choose_nodes(const TopoGraph& g, const std::vector<Reported>& reported, int total_nodes,
                              int max_nodes) {
  std::vector<int> nodes;
  auto take = [&](int n) {
    if (n >= 0 && static_cast<int>(nodes.size()) < max_nodes &&
        std::find(nodes.begin(), nodes.end(), n) == nodes.end())
      nodes.push_back(n);
  };
  for (const Reported& r : reported) {
    take(g[r.from].node);
    take(g[r.to].node);
  }
  for (int n = 0; n < total_nodes && static_cast<int>(nodes.size()) < max_nodes; ++n) take(n);
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

// Vertices of the drawn nodes (devices and NICs capped), then the switches above them, tier by
// tier: a tier-t switch is drawn when a drawn vertex one level below links to it. Returns the
// map graph vertex -> index in d.vertices (-1: not drawn).
std::vector<int> add_drawn_vertices(const TopoGraph& g, const ClusterSpec& cluster,
                                    const std::vector<int>& nodes, int tiers, const DrawLimits& limits,
                                    TopologyDrawing& d) {
  const int nv = static_cast<int>(boost::num_vertices(g));
  std::vector<int> drawn(nv, -1);
  const std::set<int> node_set(nodes.begin(), nodes.end());
  std::map<int, int> devices_seen, nics_seen;
  auto add = [&](int v) {
    drawn[v] = static_cast<int>(d.vertices.size());
    d.vertices.push_back({g[v].kind, g[v].node, g[v].tier, g[v].name, short_label(g[v], cluster), 0, 0.5});
  };
  for (int v = 0; v < nv; ++v) {
    const TopoVertex& tv = g[v];
    if (tv.node < 0 || !node_set.count(tv.node)) continue;
    if (tv.kind == VertexKind::kDevice && devices_seen[tv.node]++ >= limits.max_devices) continue;
    if (tv.kind == VertexKind::kNic && nics_seen[tv.node]++ >= limits.max_devices) continue;
    add(v);
  }
  auto level = [&](int v) { return g[v].kind == VertexKind::kSwitch ? g[v].tier : -1; };
  for (int t = 0; t < tiers; ++t) {
    std::vector<int> up;
    for (auto e : boost::make_iterator_range(boost::edges(g))) {
      const int s = static_cast<int>(boost::source(e, g)), v = static_cast<int>(boost::target(e, g));
      // Tier switches only (node -1); a torus router belongs to its node and was added with it.
      if (drawn[s] >= 0 && drawn[v] < 0 && g[v].kind == VertexKind::kSwitch && g[v].node < 0 &&
          g[v].tier == t && level(s) == t - 1)
        up.push_back(v);
    }
    std::sort(up.begin(), up.end());
    up.erase(std::unique(up.begin(), up.end()), up.end());
    for (int v : up) add(v);
  }
  d.hidden_switches_per_tier = d.switches_per_tier;
  for (const DrawnVertex& v : d.vertices)
    if (v.kind == VertexKind::kSwitch) --d.hidden_switches_per_tier[v.tier];
  return drawn;
}

// Links between drawn vertices, one per unordered pair (the wider direction's bandwidth), with the
// reported utilisation and bytes on those drawn.
void add_drawn_links(const TopoGraph& g, const std::vector<int>& drawn, const std::vector<Reported>& reported,
                     TopologyDrawing& d) {
  std::map<std::pair<int, int>, int> link_of;
  for (auto e : boost::make_iterator_range(boost::edges(g))) {
    const int s = drawn[boost::source(e, g)], t = drawn[boost::target(e, g)];
    if (s < 0 || t < 0) continue;
    const std::pair<int, int> key{std::min(s, t), std::max(s, t)};
    auto [it, fresh] = link_of.emplace(key, static_cast<int>(d.links.size()));
    if (fresh)
      d.links.push_back({key.first, key.second, g[e].kind, g[e].bandwidth});
    else
      d.links[it->second].bandwidth = std::max(d.links[it->second].bandwidth, g[e].bandwidth);
  }
  for (const Reported& r : reported) {
    const int s = drawn[r.from], t = drawn[r.to];
    if (s < 0 || t < 0) continue;
    const auto it = link_of.find({std::min(s, t), std::max(s, t)});
    if (it == link_of.end()) continue;
    DrawnLink& l = d.links[it->second];
    l.utilisation = std::max(l.utilisation, r.use->utilisation);
    l.bytes += r.use->bytes;
    ++d.drawn_reported_links;
  }
}

// Layout. Rows: tiers (highest on top), NICs, devices, node switches; one slot per drawn node
// (and one for the hidden ones).
void place_vertices(const std::vector<int>& nodes, int tiers, const DrawLimits& limits, TopologyDrawing& d) {
  d.rows = tiers + (d.nics_per_node > 0 ? 1 : 0) + 2;
  d.nic_row = d.nics_per_node > 0 ? tiers : -1;
  d.device_row = tiers + (d.nics_per_node > 0 ? 1 : 0);
  d.node_switch_row = d.device_row + 1;
  const int slots = static_cast<int>(nodes.size()) + (d.hidden_nodes > 0 ? 1 : 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    NodeSlot s;
    s.node = nodes[i];
    s.x0 = static_cast<double>(i) / slots;
    s.x1 = static_cast<double>(i + 1) / slots;
    s.hidden_devices = std::max(0, d.devices_per_node - limits.max_devices);
    d.node_slots.push_back(s);
  }
  if (d.hidden_nodes > 0) d.more_x = spread(slots - 1, slots, 0, 1);
  std::map<int, const NodeSlot*> slot_of;
  for (const NodeSlot& s : d.node_slots) slot_of[s.node] = &s;
  // Per node: devices and NICs spread over the slot in number order; the node switch (and a
  // torus router) centred.
  std::map<int, std::vector<DrawnVertex*>> devices, nics;
  std::map<int, std::vector<DrawnVertex*>> switches_by_tier;
  for (DrawnVertex& v : d.vertices) {
    if (v.kind == VertexKind::kDevice)
      devices[v.node].push_back(&v);
    else if (v.kind == VertexKind::kNic)
      nics[v.node].push_back(&v);
    else if (v.kind == VertexKind::kNodeSwitch) {
      v.row = d.node_switch_row;
      v.x = (slot_of[v.node]->x0 + slot_of[v.node]->x1) / 2;
    } else
      switches_by_tier[v.tier].push_back(&v);
  }
  auto place = [&](std::map<int, std::vector<DrawnVertex*>>& per_node, int row) {
    for (auto& [node, vs] : per_node)
      for (std::size_t i = 0; i < vs.size(); ++i) {
        vs[i]->row = row;
        vs[i]->x =
            spread(static_cast<int>(i), static_cast<int>(vs.size()), slot_of[node]->x0, slot_of[node]->x1);
      }
  };
  place(devices, d.device_row);
  place(nics, d.nic_row);
  // Switches: in graph order (group, then rail) spread over the width the nodes take; a torus
  // router above its node.
  const double nodes_x1 = d.node_slots.empty() ? 1 : d.node_slots.back().x1;
  for (auto& [tier, vs] : switches_by_tier)
    for (std::size_t i = 0; i < vs.size(); ++i) {
      vs[i]->row = tiers - 1 - tier;
      vs[i]->x = vs[i]->node >= 0 ? (slot_of[vs[i]->node]->x0 + slot_of[vs[i]->node]->x1) / 2
                                  : spread(static_cast<int>(i), static_cast<int>(vs.size()), 0, nodes_x1);
    }
}

}  // namespace

Result<TopologyDrawing> draw_topology(const ClusterSpec& cluster, const std::vector<LinkUse>& busiest,
                                      DrawLimits limits) {
  if (cluster.nodes < 1 || cluster.node.accelerators() < 1)
    return Error("cluster " + cluster.name + ": needs at least one node with an accelerator");
  MaxMinSystem system;
  const Topology topo(cluster, system);
  const TopoGraph& g = topo.graph();

  TopologyDrawing d;
  d.cluster = cluster.name;
  d.nodes = cluster.nodes;
  d.devices_per_node = topo.devices_per_node();
  d.nics_per_node = cluster.node.nics;
  d.accelerator = cluster.node.accelerator().name;
  d.torus = !cluster.tiers.empty() && cluster.tiers[0].topology == "torus";
  d.total_links = static_cast<int>(boost::num_edges(g));
  std::unordered_map<std::string, int> by_name;
  const int tiers = count_graph(g, cluster, d, by_name);
  FS_ASSIGN_OR_RETURN(const std::vector<Reported> reported,
                      resolve_reported(busiest, by_name, cluster, d.nodes));
  d.reported_links = static_cast<int>(reported.size());
  const std::vector<int> nodes = choose_nodes(g, reported, d.nodes, limits.max_nodes);
  d.hidden_nodes = d.nodes - static_cast<int>(nodes.size());
  const std::vector<int> drawn = add_drawn_vertices(g, cluster, nodes, tiers, limits, d);
  add_drawn_links(g, drawn, reported, d);
  place_vertices(nodes, tiers, limits, d);
  return d;
}

std::string describe(const TopologyDrawing& d) {
  std::string tiers;
  for (std::size_t t = 0; t < d.tier_names.size(); ++t)
    tiers += (t ? ", " : "") + d.tier_names[t] + " " + std::to_string(d.switches_per_tier[t]);
  std::string s = d.cluster + ", " + std::to_string(d.nodes) + " node" + (d.nodes == 1 ? "" : "s") + " x " +
                  std::to_string(d.devices_per_node) + " " + d.accelerator + ": " +
                  std::to_string(d.total_node_switches) + " node switch" +
                  (d.total_node_switches == 1 ? "" : "es") + ", " + std::to_string(d.total_nics) + " NICs, ";
  s += d.torus ? std::to_string(d.total_switches) + " torus routers"
               : std::to_string(d.total_switches) + " network switches" +
                     (tiers.empty() ? "" : " (" + tiers + ")");
  s += ", " + std::to_string(d.total_links) + " directed links; " + std::to_string(d.drawn_nodes()) + " of " +
       std::to_string(d.nodes) + " nodes drawn";
  return s;
}

QColor utilisation_colour(double u) {
  if (u < 0) return QColor(0xb0, 0xb0, 0xb0);
  // Hue 120 (green) at 0 to 0 (red) at 1; yellow (60) at one half.
  const double clamped = std::clamp(u, 0.0, 1.0);
  return QColor::fromHsvF(static_cast<float>((1.0 - clamped) / 3.0), 0.85f, 0.85f);
}

double utilisation_scale(const TopologyDrawing& d) {
  double top = -1;
  for (const DrawnLink& l : d.links) top = std::max(top, l.utilisation);
  if (top < 0) return 1.0;
  return std::clamp(std::ceil(top * 10 - 1e-9) / 10, 0.1, 1.0);
}

QColor link_colour(const TopologyDrawing& d, const DrawnLink& l) {
  return l.reported() ? utilisation_colour(l.utilisation / utilisation_scale(d)) : utilisation_colour(-1);
}

std::vector<std::size_t> busiest_drawn_links(const TopologyDrawing& d, std::size_t n) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < d.links.size(); ++i)
    if (d.links[i].reported()) out.push_back(i);
  std::stable_sort(out.begin(), out.end(), [&](std::size_t a, std::size_t b) {
    return d.links[a].utilisation > d.links[b].utilisation;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

Result<LinkReport> simulate_link_use(const PlanInputs& in) {
  FS_ASSIGN_OR_RETURN(ResolvedPlan r, resolve_plan(in));
  FS_ASSIGN_OR_RETURN(SimResult sim, simulate(r.model, r.cluster, r.plan, "plan", SimOptions{}));
  LinkReport out;
  out.inputs = in;
  out.cluster = std::move(r.cluster);
  out.busiest = std::move(sim.busiest_links);
  out.step_s = sim.prediction.step_time_s;
  return out;
}

}  // namespace foresight::gui
