// A team's own service, as faultline meets it: an Express app that prices a quote by calling its pricing
// dependency through an opossum circuit breaker, and exports the breaker's state with prom-client. Nothing in it
// knows faultline: the dependency's address comes from PRICING_URL, the port from PORT.
//
//   PORT=8080 PRICING_URL=http://127.0.0.1:9000 node server.js
//
// GET /quote/:id   the quote, or a fallback price (header x-fallback: 1) while the breaker is open
// GET /health      200 once listening
// GET /metrics     pricing_breaker_state{breaker="pricing"} 0 closed, 1 open, 2 half-open; opossum's events as
//                  pricing_breaker_events_total{event}; prom-client's default process and Node.js metrics

'use strict';

const express = require('express');
const CircuitBreaker = require('opossum');
const client = require('prom-client');

const port = Number(process.env.PORT || 8080);
const pricingUrl = process.env.PRICING_URL || 'http://127.0.0.1:9000';
// The path of the dependency's price resource: a wrong one is the commonest first-run mistake.
const pricingPath = process.env.PRICING_PATH || '/price/';
const host = '127.0.0.1';

async function price(id) {
  const res = await fetch(`${pricingUrl}${pricingPath}${id}`, { signal: AbortSignal.timeout(1000) });
  if (res.status >= 500) {
    throw new Error(`pricing answered ${res.status}`);
  }
  return { id, status: res.status, body: await res.text() };
}

const breaker = new CircuitBreaker(price, {
  timeout: Number(process.env.BREAKER_TIMEOUT_MS || 200),
  errorThresholdPercentage: 50,
  volumeThreshold: 10,
  rollingCountTimeout: 2000,
  rollingCountBuckets: 10,
  resetTimeout: Number(process.env.BREAKER_RESET_MS || 2000),
});
breaker.fallback((id) => ({ id, fallback: true }));

const state = new client.Gauge({
  name: 'pricing_breaker_state',
  help: 'The pricing breaker: 0 closed, 1 open, 2 half-open',
  labelNames: ['breaker'],
});
state.set({ breaker: 'pricing' }, 0);
for (const [event, value] of [['close', 0], ['open', 1], ['halfOpen', 2]]) {
  breaker.on(event, () => {
    state.set({ breaker: 'pricing' }, value);
    console.log(`breaker pricing -> ${event}`);
  });
}

// What a team counts besides the state: each of opossum's events, and prom-client's own metrics of the process.
const events = new client.Counter({
  name: 'pricing_breaker_events_total',
  help: "opossum's events on the pricing breaker",
  labelNames: ['event'],
});
for (const event of ['success', 'failure', 'timeout', 'reject', 'fallback']) {
  breaker.on(event, () => events.inc({ event }));
}
client.collectDefaultMetrics();

const app = express();
app.get('/health', (_req, res) => res.send('ok\n'));
app.get('/metrics', async (_req, res) => {
  res.set('content-type', client.register.contentType);
  res.send(await client.register.metrics());
});
app.get('/quote/:id', async (req, res) => {
  const quote = await breaker.fire(req.params.id);
  if (quote.fallback) {
    res.set('x-fallback', '1');
  }
  res.json(quote);
});

const server = app.listen(port, host, () => console.log(`listening on http://${host}:${port}`));
server.keepAliveTimeout = 65000;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
