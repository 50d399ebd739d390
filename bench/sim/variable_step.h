// A step of simulated work whose speed can change while it runs (a prefill
// or decode instance slowed while its colocated neighbour computes): the
// seconds it still needs at full speed, its current speed and when those
// were last brought up to date. A change of speed moves its end: the
// simulator pushes the end event again under a new `gen` and skips the old
// one. Used by both simulators (simulator.cc, agent_sim.cc).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ced::sim {

struct VariableStep {
  double left_s = 0, speed = 1, since_s = 0, start_s = 0;
  uint32_t gen = 0;

  // Starts a step of `seconds` at full speed, run at `speed`, at `now`;
  // returns its end.
  double Begin(double now, double seconds, double new_speed) {
    left_s = seconds;
    speed = new_speed;
    since_s = now;
    start_s = now;
    ++gen;
    return now + seconds / new_speed;
  }
  // Changes the running step's speed at `now`; false when it stays the same.
  bool Respeed(double now, double new_speed) {
    if (new_speed == speed) return false;
    left_s = std::max(0.0, left_s - (now - since_s) * speed);
    speed = new_speed;
    since_s = now;
    return true;
  }
  double End(double now) const { return now + left_s / speed; }
};

}  // namespace ced::sim
