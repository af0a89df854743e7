// Drives real @waku/sds MessageChannels for scripts/interop/waku_fixtures.py.
//
// Usage: node waku_driver.mjs <path of node_modules/@waku/sds/dist>
// Reads one JSON command per line on stdin, answers one JSON line on stdout. Bytes travel as
// lower-case hex. Every command answers {"ok": true, ...} or {"ok": false, "error": "..."}.
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const dist = process.argv[2];
const sds = await import(pathToFileURL(`${dist}/index.js`).href);
const bloom = await import(pathToFileURL(`${dist}/bloom_filter/bloom.js`).href);
const { MessageChannel, MessageChannelEvent, Message } = sds;
const BLOOM_OPTIONS = { capacity: 10000, errorRate: 0.001 };

const hex = (bytes) => Buffer.from(bytes ?? []).toString("hex");
const unhex = (text) => new Uint8Array(Buffer.from(text, "hex"));
const channels = new Map();

function entries(list) {
  return (list ?? []).map((e) => ({
    message_id: e.messageId,
    sender_id: e.senderId ?? null,
    retrieval_hint: e.retrievalHint ? hex(e.retrievalHint) : null
  }));
}

function describe(message) {
  return {
    message_id: message.messageId,
    channel_id: message.channelId,
    sender_id: message.senderId,
    lamport: message.lamportTimestamp === undefined ? null : message.lamportTimestamp.toString(),
    causal_history: entries(message.causalHistory),
    repair_request: entries(message.repairRequest),
    bloom_bytes: message.bloomFilter ? message.bloomFilter.length : null,
    content: message.content ? hex(message.content) : null,
    kind: sds.isContentMessage(message) ? "content"
      : sds.isSyncMessage(message) ? "sync"
      : sds.isEphemeralMessage(message) ? "ephemeral" : "unknown"
  };
}

function open(name, channelId, senderId, options) {
  const channel = new MessageChannel(channelId, senderId, options ?? {});
  const seen = [];
  const record = (kind) => (event) => seen.push({ kind, detail: event.detail });
  const names = {
    delivered: MessageChannelEvent.InMessageDelivered,
    acknowledged: MessageChannelEvent.OutMessageAcknowledged,
    possibly_acknowledged: MessageChannelEvent.OutMessagePossiblyAcknowledged,
    missing: MessageChannelEvent.InMessageMissing,
    sync_received: MessageChannelEvent.InSyncReceived,
    repair_request_received: MessageChannelEvent.RepairRequestReceived,
    error: MessageChannelEvent.ErrorTask
  };
  for (const [kind, event] of Object.entries(names)) {
    channel.addEventListener(event, record(kind));
  }
  channels.set(name, { channel, seen });
}

function drain(name) {
  const state = channels.get(name);
  const out = state.seen.map(({ kind, detail }) => {
    if (kind === "missing") return { kind, ids: detail.map((e) => e.messageId) };
    if (kind === "possibly_acknowledged") return { kind, id: detail.messageId, count: detail.count };
    if (kind === "sync_received") return { kind, id: detail.messageId };
    if (kind === "repair_request_received") return { kind, ids: detail.messageIds };
    if (kind === "error") return { kind, error: String(detail.error) };
    return { kind, id: detail };
  });
  state.seen.length = 0;
  return out;
}

async function run(cmd) {
  switch (cmd.op) {
    case "new":
      open(cmd.name, cmd.channel, cmd.sender, cmd.options);
      return {};
    case "send": {
      const { channel } = channels.get(cmd.name);
      let wire = null;
      channel.pushOutgoingMessage(unhex(cmd.payload), async (message) => {
        wire = hex(message.encode());
        return { success: true };
      });
      await channel.processTasks();
      return { wire, events: drain(cmd.name) };
    }
    case "ephemeral": {
      const { channel } = channels.get(cmd.name);
      let wire = null;
      await channel.pushOutgoingEphemeralMessage(unhex(cmd.payload), async (message) => {
        wire = hex(message.encode());
        return true;
      });
      await channel.processTasks();
      return { wire };
    }
    case "sync": {
      const { channel } = channels.get(cmd.name);
      let wire = null;
      await channel.pushOutgoingSyncMessage(async (message) => {
        wire = hex(message.encode());
        return true;
      });
      return { wire, events: drain(cmd.name) };
    }
    case "receive": {
      const { channel } = channels.get(cmd.name);
      const message = Message.decode(unhex(cmd.wire));
      if (message === undefined) {
        return { decoded: null, events: [] };
      }
      channel.pushIncomingMessage(message, undefined);
      await channel.processTasks();
      return { decoded: describe(message), events: drain(cmd.name) };
    }
    case "decode": {
      const message = Message.decode(unhex(cmd.wire));
      return { decoded: message === undefined ? null : describe(message) };
    }
    case "sweep": {
      // The package delivers messages whose dependencies arrived later only here (its
      // users call it periodically).
      const { channel } = channels.get(cmd.name);
      const missing = channel.sweepIncomingBuffer();
      return { missing: missing.map((e) => e.messageId), events: drain(cmd.name) };
    }
    case "repairs": {
      const { channel } = channels.get(cmd.name);
      const wires = [];
      await channel.sweepRepairIncomingBuffer(async (message) => {
        wires.push(hex(message.encode()));
        return true;
      });
      return { wires };
    }
    case "bloom": {
      const filter = new bloom.DefaultBloomFilter(BLOOM_OPTIONS);
      const indices = {};
      for (const id of cmd.ids) {
        filter.insert(id);
        indices[id] = filter.computeHashes(id);
      }
      return {
        bytes: hex(filter.toBytes()), total_bits: filter.totalBits, hashes: filter.kHashes,
        words: filter.data.length, indices
      };
    }
    case "lookup": {
      // Throws (answered as an error) when the bytes are too short for the package's filter.
      const filter = bloom.DefaultBloomFilter.fromBytes(unhex(cmd.bytes), BLOOM_OPTIONS);
      return { found: cmd.ids.map((id) => filter.lookup(id)) };
    }
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  let answer;
  try {
    answer = { ok: true, ...(await run(JSON.parse(line))) };
  } catch (error) {
    answer = { ok: false, error: String(error?.stack ?? error) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
