// faultd's Toxiproxy API driven by the stock toxiproxy-node-client, unmodified.
//
// Run by faultd/tests/toxiproxy_clients.rs with FAULTD_TOXIPROXY (the API's host:port) and ECHO_UPSTREAM (an echo
// server's host:port) set, and NODE_PATH pointing at the node_modules that hold the client. Walks a proxy's life
// cycle and checks the effects on real traffic over 127.0.0.1.
"use strict";

const net = require("net");
const { Toxiproxy } = require("toxiproxy-node-client");

const API = `http://${process.env.FAULTD_TOXIPROXY}`;
const UPSTREAM = process.env.ECHO_UPSTREAM;

const TOXICS = [
  ["latency", { latency: 300, jitter: 0 }, { jitter: 5 }],
  ["bandwidth", { rate: 100 }, { rate: 200 }],
  ["slow_close", { delay: 100 }, { delay: 200 }],
  ["timeout", { timeout: 100 }, { timeout: 200 }],
  ["reset_peer", { timeout: 100 }, { timeout: 200 }],
  ["limit_data", { bytes: 100 }, { bytes: 200 }],
  ["slicer", { average_size: 10, size_variation: 5, delay: 100 }, { delay: 200 }],
  ["stall", {}, {}],
  ["connect_delay", { delay: 100 }, { delay: 200 }],
];

function check(condition, what) {
  if (!condition) {
    console.error(`FAILED: ${what}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

function split(listen) {
  const i = listen.lastIndexOf(":");
  return { host: listen.slice(0, i), port: Number(listen.slice(i + 1)) };
}

// Resolves with what a fresh connection saw: {ms} for an echo, or {error: code}.
function roundTrip(listen, payload = "PING") {
  return new Promise((resolve) => {
    const { host, port } = split(listen);
    const socket = net.connect({ host, port });
    let got = "";
    let start;
    const timer = setTimeout(() => { socket.destroy(); resolve({ error: "TIMEOUT" }); }, 5000);
    socket.on("connect", () => { start = process.hrtime.bigint(); socket.write(payload); });
    socket.on("data", (d) => {
      got += d.toString();
      if (got.length >= payload.length) {
        const ms = Number(process.hrtime.bigint() - start) / 1e6;
        clearTimeout(timer);
        socket.destroy();
        resolve({ ms });
      }
    });
    socket.on("error", (e) => { clearTimeout(timer); resolve({ error: e.code }); });
    socket.on("end", () => { clearTimeout(timer); resolve({ error: "EOF" }); });
  });
}

async function refused(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return String(e.message);
  }
}

async function main() {
  const toxiproxy = new Toxiproxy(API);
  check((await toxiproxy.getVersion()).startsWith("2."), "version reads as Toxiproxy 2.x");
  for (const p of Object.values(await toxiproxy.getAll())) await p.remove();

  const populated = await toxiproxy.populate([{ name: "node_pop", listen: "127.0.0.1:0", upstream: UPSTREAM }]);
  check(populated.node_pop && populated.node_pop.enabled, "populate creates a proxy");
  check((await roundTrip(populated.node_pop.listen)).ms < 250, "a populated proxy forwards");

  const proxy = await toxiproxy.createProxy({ name: "node_db", listen: "127.0.0.1:0", upstream: UPSTREAM });
  check(proxy.enabled && !proxy.listen.endsWith(":0"), "create answers the proxy with the port picked");
  const dup = await refused(() => toxiproxy.createProxy({ name: "node_db", listen: "127.0.0.1:0", upstream: UPSTREAM }));
  check(dup && dup.includes("409"), `a duplicate name is refused with 409 (${dup})`);
  const all = await toxiproxy.getAll();
  check(Object.keys(all).sort().join() === "node_db,node_pop", "list shows both proxies");
  check((await toxiproxy.get("node_db")).upstream === UPSTREAM, "get reads a proxy back");

  for (const [type, attributes, change] of TOXICS) {
    const name = `${type}_down`;
    const added = await proxy.addToxic({ name, type, stream: "downstream", toxicity: 1, attributes });
    check(added.type === type && added.stream === "downstream", `${type} is added`);
    const back = await proxy.getToxic(name);
    check(Object.entries(attributes).every(([k, v]) => back.attributes[k] === v), `${type} reads back its attributes`);
    const updated = await back.update({ attributes: change, toxicity: 0.5 });
    check(Object.entries(change).every(([k, v]) => updated.attributes[k] === v) && updated.toxicity === 0.5, `${type} is updated`);
    await updated.remove();
    const gone = await refused(() => proxy.getToxic(name));
    check(gone && gone.includes("404"), `${type} is removed`);
  }
  const bad = await refused(() => proxy.addToxic({ type: "teleport", stream: "downstream", toxicity: 1, attributes: {} }));
  check(bad && bad.includes("400"), "an unknown toxic type is refused with 400");

  const latency = await proxy.addToxic({ type: "latency", stream: "downstream", toxicity: 1, attributes: { latency: 300, jitter: 0 } });
  const slow = await roundTrip(proxy.listen);
  check(slow.ms >= 300, `latency 300 ms makes a round trip take 300 ms or more (${slow.ms} ms)`);
  await latency.remove();
  check((await roundTrip(proxy.listen)).ms < 250, "without the toxic the round trip is quick again");

  const reset = await proxy.addToxic({ type: "reset_peer", stream: "downstream", toxicity: 1, attributes: { timeout: 0 } });
  const seen = await roundTrip(proxy.listen);
  check(seen.error === "ECONNRESET", `reset_peer resets the connection (${JSON.stringify(seen)})`);
  await reset.remove();

  const down = await proxy.update({ enabled: false });
  check(down.enabled === false, "disable answers enabled: false");
  const refusedConnect = await roundTrip(proxy.listen);
  check(refusedConnect.error === "ECONNREFUSED", `a disabled proxy refuses connects (${JSON.stringify(refusedConnect)})`);
  const up = await proxy.update({ enabled: true });
  check(up.enabled === true && (await roundTrip(proxy.listen)).ms < 250, "an enabled proxy forwards again");

  await proxy.addToxic({ type: "timeout", stream: "upstream", toxicity: 1, attributes: { timeout: 0 } });
  await proxy.update({ enabled: false });
  await toxiproxy.reset();
  const after = await toxiproxy.get("node_db");
  check(after.enabled === true, "reset enables every proxy");
  check((await roundTrip(after.listen)).ms < 250, "reset removes every toxic");

  await proxy.remove();
  const missing = await refused(() => toxiproxy.get("node_db"));
  check(missing && missing.includes("404"), "a deleted proxy is gone");
  for (const p of Object.values(await toxiproxy.getAll())) await p.remove();
  check(Object.keys(await toxiproxy.getAll()).length === 0, "every proxy deleted");
}

main().catch((e) => {
  console.error(`FAILED: ${e.stack || e}`);
  process.exit(1);
});
