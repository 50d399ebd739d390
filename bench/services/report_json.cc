// FormatJson of report.h: every raw sample plus its summary.
#include <nlohmann/json.hpp>

#include "bench/services/report.h"

namespace ced::bench {
namespace {

using nlohmann::json;

json J(const Summary& s) {
  return json{{"n", s.n},   {"median", s.median}, {"min", s.min},        {"max", s.max},
              {"q1", s.q1}, {"q3", s.q3},         {"spread", s.spread()}};
}

json Transport(const TransportReport& t) {
  json cells = json::array();
  for (const TransportCell& c : t.cells) {
    cells.push_back({{"ucx_tls", c.tls},
                     {"message_bytes", c.size},
                     {"ours_gbps", c.ours_gbps},
                     {"perftest_gbps", c.perftest_gbps},
                     {"ratio", c.ratio},
                     {"ours", J(c.ours)},
                     {"perftest", J(c.perftest)},
                     {"ratio_summary", J(c.ratio_summary)},
                     {"ours_blocking_gbps", c.blocking_gbps},
                     {"ours_blocking", J(c.blocking)},
                     {"ours_single_in_flight_gbps", c.single_gbps},
                     {"ours_single_in_flight", J(c.single)},
                     {"best_ratio", c.best_ratio},
                     {"meets_80_percent_best", c.best_ratio >= 0.8},
                     {"meets_80_percent_paired", c.ratio_summary.median >= 0.8},
                     {"perftest_peer_error_handling_gbps", c.perftest_peer_gbps},
                     {"perftest_peer_error_handling", J(c.perftest_peer)},
                     {"ratio_peer_error_handling", c.ratio_peer},
                     {"ratio_peer_error_handling_summary", J(c.ratio_peer_summary)},
                     {"best_ratio_peer_error_handling", c.best_ratio_peer}});
  }
  json lanes = json::array();
  for (const LaneRow& l : t.lanes) {
    lanes.push_back(
        {{"ucx_tls", l.tls},
         {"kv_transport",
          {{"am", l.ours.am}, {"rndv", l.ours.rndv}, {"am_protocols", l.ours.am_protocols}}},
         {"perftest",
          {{"am", l.perftest.am},
           {"rndv", l.perftest.rndv},
           {"am_protocols", l.perftest.am_protocols}}}});
  }
  json crc_by_impl = json::array();
  for (const auto& r : t.crc32c_by_impl) {
    crc_by_impl.push_back({{"impl", r.impl},
                           {"crc32c_gbps", J(r.crc32c_gbps)},
                           {"copy_crc32c_gbps", J(r.copy_crc32c_gbps)}});
  }
  const TransportBenchOptions& o = t.options;
  return {{"ucx_version", t.ucx_version},
          {"lanes", lanes},
          {"crc32c_gbps", J(t.crc32c_gbps)},
          {"memcpy_gbps", J(t.memcpy_gbps)},
          {"copy_crc32c_gbps", J(t.copy_crc32c_gbps)},
          {"crc32c_impl", t.crc32c_impl},
          {"crc32c_by_impl", crc_by_impl},
          {"perftest_test", o.perftest_test},
          {"threads_in_flight", o.threads},
          {"bytes_per_sample", o.bytes_per_sample},
          {"repetitions", o.repetitions},
          {"cells", cells}};
}

json Ttft(const TtftReport& t) {
  json rows = json::array();
  for (const TtftRow& r : t.rows) {
    json samples = json::array();
    for (const TtftSample& s : r.samples) {
      samples.push_back({{"client_ttft_ms", s.client_ttft_ms},
                         {"second_token_gap_ms", s.second_token_gap_ms},
                         {"gateway_queue_ms", s.gw_queue_ms},
                         {"gateway_prefill_ms", s.gw_prefill_ms},
                         {"gateway_transfer_ms", s.gw_transfer_ms},
                         {"gateway_ttft_ms", s.gw_ttft_ms},
                         {"gateway_total_ms", s.gw_total_ms},
                         {"kv_ready_ms", s.ready_ms},
                         {"not_overlapped_ms", s.nonoverlap_ms},
                         {"kv_bytes", s.transfer_bytes}});
    }
    rows.push_back({{"replay_on", r.replay_on},
                    {"replay_ran_on", r.placement_seen},
                    {"client_ttft_ms", J(r.client_ttft)},
                    {"gateway_ttft_ms", J(r.gw_ttft)},
                    {"prefill_ms", J(r.prefill)},
                    {"gateway_transfer_ms", J(r.gw_transfer)},
                    {"kv_ready_ms", J(r.ready)},
                    {"not_overlapped_ms", J(r.nonoverlap)},
                    {"share_of_ttft_gateway_transfer_ms", J(r.share_gateway)},
                    {"share_of_ttft_decode_side", J(r.share_nonoverlap)},
                    {"second_token_gap_ms", J(r.second_gap)},
                    {"samples", samples}});
  }
  const TtftBenchOptions& o = t.options;
  return {{"preset", o.preset},
          {"prompt_tokens", o.prompt_tokens},
          {"max_tokens", o.max_tokens},
          {"repetitions", o.repetitions},
          {"ucx_tls", o.ucx_tls},
          {"cluster_startup_s", t.cluster_startup_s},
          {"rows", rows}};
}

json Gateway(const GatewayReport& g) {
  json paths = json::array();
  for (const LatencyPath& p : g.paths) {
    paths.push_back({{"path", p.name},
                     {"ttft_ms", J(p.ttft)},
                     {"tpot_ms", J(p.tpot)},
                     {"ttft_samples_ms", p.ttft_ms},
                     {"tpot_samples_ms", p.tpot_ms}});
  }
  json tput = json::array();
  for (const ThroughputPoint& p : g.throughput) {
    json sides = json::array();
    for (const ThroughputSide& side : p.sides) {
      json cpu = json::array();
      for (const auto& rep : side.cpu_ms_per_ktok) {
        json one;
        for (size_t i = 0; i < rep.size() && i < CpuProcesses().size(); ++i) {
          one[CpuProcesses()[i]] = rep[i];
        }
        cpu.push_back(one);
      }
      sides.push_back({{"path", side.path},
                       {"tokens_per_s", J(side.tokens_per_s)},
                       {"samples", side.tps},
                       {"stream_ttft_ms", side.ttft_ms},
                       {"stream_tpot_ms", side.tpot_ms},
                       {"cpu_ms_per_1000_tokens", cpu}});
    }
    tput.push_back({{"concurrency", p.concurrency}, {"paths", sides}});
  }
  const GatewayBenchOptions& o = g.options;
  return {{"preset", o.preset},
          {"cluster_flags", o.cluster_flags},
          {"embedded_router", o.embedded_router},
          {"prompt_tokens", o.prompt_tokens},
          {"max_tokens", o.max_tokens},
          {"stream_tokens", o.stream_tokens},
          {"stream_prompt_tokens", o.stream_prompt_tokens},
          {"latency", paths},
          {"throughput", tput}};
}

json KvBytes(const KvBytesReport& k) {
  json rows = json::array();
  for (const KvBytesRow& r : k.rows) {
    rows.push_back({{"preset", r.preset},
                    {"format", r.format},
                    {"decoder_only", r.decoder_only},
                    {"short_prompt", r.short_prompt},
                    {"long_prompt", r.long_prompt},
                    {"bytes_short", r.bytes_short},
                    {"bytes_long", r.bytes_long},
                    {"prefill_out_long", r.prefill_out_long},
                    {"bytes_per_token_wire", r.slope},
                    {"bytes_per_token_accounting", r.accounting_per_token},
                    {"bytes_per_token_hand", r.hand_per_token},
                    {"hand_formula", r.hand_formula},
                    {"tail_bytes_replay_decode", r.tail_decode},
                    {"tail_bytes_replay_prefill", r.tail_prefill},
                    {"tail_bytes_replay_decode_hand", r.hand_tail_decode},
                    {"tail_bytes_replay_prefill_hand", r.hand_tail_prefill},
                    {"bytes_long_replay_prefill", r.bytes_long_replay_prefill}});
  }
  return {{"rows", rows}};
}

}  // namespace

std::string FormatJson(const ServicesReport& r) {
  const MachineFacts& m = r.machine;
  json doc = {{"command", r.command},
              {"date_utc", r.date_utc},
              {"wall_s", r.wall_s},
              {"quick", r.quick},
              {"machine",
               {{"cpu_model", m.cpu_model},
                {"logical_cores", m.logical_cores},
                {"mem_total_gib", m.mem_total_gib},
                {"kernel", m.kernel},
                {"load_start", m.load_start},
                {"load_end", m.load_end},
                {"ucx_version", m.ucx_version},
                {"ucx_tls_env", m.ucx_tls_env}}}};
  if (r.transport) doc["transport"] = Transport(*r.transport);
  if (r.ttft) doc["ttft"] = Ttft(*r.ttft);
  if (r.gateway) doc["gateway"] = Gateway(*r.gateway);
  if (r.kv_bytes) doc["kv_bytes"] = KvBytes(*r.kv_bytes);
  return doc.dump(2) + "\n";
}

}  // namespace ced::bench
