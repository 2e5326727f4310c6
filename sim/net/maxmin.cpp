// Progressive filling over the changed component of the resource-sharing graph.
#include "sim/net/maxmin.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace foresight {

int MaxMinSystem::add_resource(double capacity) {
  resources_.push_back(Resource{capacity, {}, false, 0});
  remaining_.push_back(0);
  weight_sum_.push_back(0);
  share_.push_back(0);
  return static_cast<int>(resources_.size()) - 1;
}

int MaxMinSystem::add_action(const std::vector<Usage>& usages, double bound) {
  int id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int>(actions_.size());
    actions_.emplace_back();
  }
  Action& a = actions_[id];
  a.usages.assign(usages.begin(), usages.end());
  a.rate = 0;
  a.bound = bound;
  a.active = true;
  for (const Usage& u : a.usages) {
    Resource& r = resources_[u.resource];
    r.actions.push_back(id);
    if (!r.dirty) {
      r.dirty = true;
      dirty_.push_back(u.resource);
    }
  }
  if (a.usages.empty()) a.rate = bound;  // uses nothing shared: only its bound limits it
  return id;
}

void MaxMinSystem::remove_action(int id) {
  Action& a = actions_[id];
  if (!a.active) return;
  for (const Usage& u : a.usages) {
    Resource& r = resources_[u.resource];
    auto it = std::find(r.actions.begin(), r.actions.end(), id);
    if (it != r.actions.end()) {
      *it = r.actions.back();
      r.actions.pop_back();
    }
    if (!r.dirty) {
      r.dirty = true;
      dirty_.push_back(u.resource);
    }
  }
  a.active = false;
  a.usages.clear();
  a.rate = 0;
  free_ids_.push_back(id);
}

double MaxMinSystem::load(int resource) const {
  double l = 0;
  for (int id : resources_[resource].actions) {
    const Action& a = actions_[id];
    for (const Usage& u : a.usages)
      if (u.resource == resource) l += u.weight * a.rate;
  }
  return l;
}

void MaxMinSystem::solve(std::vector<int>* changed) {
  if (dirty_.empty()) return;
  collect_component();
  if (comp_actions_.size() == 1) {
    solve_alone(changed);
    return;
  }
  for (int r : comp_resources_) remaining_[r] = resources_[r].capacity;
  old_rates_.clear();
  for (int id : comp_actions_) {
    old_rates_.push_back(actions_[id].rate);
    actions_[id].fixed = false;
  }
  std::size_t unfixed = comp_actions_.size();
  while (unfixed > 0) unfixed -= fill_level();
  if (changed) {
    for (std::size_t i = 0; i < comp_actions_.size(); ++i)
      if (actions_[comp_actions_[i]].rate != old_rates_[i]) changed->push_back(comp_actions_[i]);
  }
}

void MaxMinSystem::collect_component() {
  ++stamp_;
  comp_actions_.clear();
  comp_resources_.clear();
  // The component: everything reachable from a dirty resource through shared actions.
  stack_.assign(dirty_.begin(), dirty_.end());
  for (int r : dirty_) {
    resources_[r].dirty = false;
    resources_[r].mark = stamp_;
    comp_resources_.push_back(r);
  }
  dirty_.clear();
  while (!stack_.empty()) {
    const int r = stack_.back();
    stack_.pop_back();
    for (int id : resources_[r].actions) {
      Action& a = actions_[id];
      if (a.mark == stamp_) continue;
      a.mark = stamp_;
      comp_actions_.push_back(id);
      for (const Usage& u : a.usages) {
        Resource& rr = resources_[u.resource];
        if (rr.mark != stamp_) {
          rr.mark = stamp_;
          comp_resources_.push_back(u.resource);
          stack_.push_back(u.resource);
        }
      }
    }
  }
}

void MaxMinSystem::solve_alone(std::vector<int>* changed) {
  // One action alone on its resources (a collective inside a node, most often): its rate is its
  // tightest resource share or its bound -- what progressive filling would find in one level.
  Action& a = actions_[comp_actions_[0]];
  for (const Usage& u : a.usages) weight_sum_[u.resource] = 0;
  for (const Usage& u : a.usages) weight_sum_[u.resource] += u.weight;  // a link used twice
  double level = a.bound;
  for (const Usage& u : a.usages)
    if (weight_sum_[u.resource] > 0)
      level = std::min(level, std::max(0.0, resources_[u.resource].capacity) / weight_sum_[u.resource]);
  if (!std::isfinite(level)) level = 0;
  const double old = a.rate;
  a.rate = level;
  if (changed && level != old) changed->push_back(comp_actions_[0]);
}

std::size_t MaxMinSystem::fill_level() {
  for (int r : comp_resources_) weight_sum_[r] = 0;
  for (int id : comp_actions_) {
    const Action& a = actions_[id];
    if (a.fixed) continue;
    for (const Usage& u : a.usages) weight_sum_[u.resource] += u.weight;
  }
  // The tightest resource, or the tightest action bound, decides the next level. Each share is
  // kept for the saturation test below, which divided again per usage (the same quotient).
  double level = std::numeric_limits<double>::infinity();
  for (int r : comp_resources_) {
    share_[r] = weight_sum_[r] > 0 ? std::max(0.0, remaining_[r]) / weight_sum_[r]
                                   : std::numeric_limits<double>::infinity();
    level = std::min(level, share_[r]);
  }
  for (int id : comp_actions_)
    if (!actions_[id].fixed) level = std::min(level, actions_[id].bound);
  if (!std::isfinite(level)) level = 0;  // nothing constrains: cannot happen with usages
  // Fix every action on a saturated resource, and every action whose bound is reached.
  const double eps = 1e-12 * std::max(1.0, level);
  stack_.clear();  // the actions fixed at this level
  for (int id : comp_actions_) {
    Action& a = actions_[id];
    if (a.fixed) continue;
    bool saturated = a.bound <= level + eps;
    for (const Usage& u : a.usages) {
      if (share_[u.resource] <= level + eps) {
        saturated = true;
        break;
      }
    }
    if (!saturated) continue;
    stack_.push_back(id);
  }
  if (stack_.empty()) {  // rounding left nothing exactly at the level: fix the rest there
    for (int id : comp_actions_)
      if (!actions_[id].fixed) stack_.push_back(id);
  }
  for (int id : stack_) {
    Action& a = actions_[id];
    a.fixed = true;
    a.rate = level;
    for (const Usage& u : a.usages) remaining_[u.resource] -= u.weight * level;
  }
  return stack_.size();
}

}  // namespace foresight
