// simulst's web page: the settings come from GET /api/config; the audio (the microphone, or a file played at the
// pace it was spoken) goes as 16-bit PCM over the websocket /ws (the protocol: simulst/server/protocol.py); the
// committed text comes back as "emission" messages and is appended to the captions, never rewritten.

import { Resampler, floatToInt16, mixToMono } from "./pcm-worklet.js";

const BLOCK_MS = 100; // audio per binary frame

const $ = (id) => document.getElementById(id);

let config = null; // the server's GET /api/config
let current = null; // the latest Stream (running or over: its text stays shown)

// ------------------------------------------------------------------------------------------------ settings

/** Fill the controls from the server's configuration. */
async function loadConfig() {
  try {
    const response = await fetch("/api/config");
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    config = await response.json();
  } catch (err) {
    setStatus("error", "error");
    showError(`cannot read the server's configuration (/api/config): ${err.message}`);
    return;
  }
  $("model").textContent =
    `model ${config.model} · ${config.sample_rate} Hz` + (config.batched ? " · batched decoding" : "");
  fillSelect($("task"), config.tasks, config.tasks[0]);
  fillSelect($("to"), ["", ...config.targets], "", { "": "none" });
  fillSelect($("policy"), config.policies, config.policy);
  const chunk = $("chunk");
  chunk.min = config.chunk_ms.min;
  chunk.max = config.chunk_ms.max;
  chunk.value = config.chunk_ms.default;
  $("token-field").hidden = !config.token_required;
  $("task").disabled = config.tasks.length < 2;
  updateTo();
  $("start").disabled = false;
}

/** Replace a <select>'s options with `values` (labels from `labels`, else the value) and select `chosen`. */
function fillSelect(select, values, chosen, labels = {}) {
  if (!values.includes(chosen)) values = [chosen, ...values]; // (a server default outside the usual list)
  select.replaceChildren(...values.map((value) => new Option(labels[value] ?? value, value)));
  select.value = chosen;
}

/** A cascade ("to") translates the transcript: only offered with the "transcribe" task. */
function updateTo() {
  $("to").disabled = config.targets.length === 0 || $("task").value !== "transcribe";
}

/** The start message from the controls (empty fields left out). */
function startMessage() {
  const message = { type: "start", sample_rate: config.sample_rate };
  if ($("task").value) message.task = $("task").value;
  if (!$("to").disabled && $("to").value) message.to = $("to").value;
  if ($("policy").value) message.policy = $("policy").value;
  const chunkText = $("chunk").value.trim();
  if (chunkText) {
    const chunk = Number(chunkText);
    const { min, max } = config.chunk_ms;
    if (!Number.isFinite(chunk) || chunk < min || chunk > max) {
      throw new Error(`the chunk must be from ${min} to ${max} ms`);
    }
    message.chunk_ms = chunk;
  }
  const prompt = $("prompt").value.trim();
  if (prompt) message.prompt = prompt;
  return message;
}

/** ws(s)://<this host>/ws: never with the token (a URL lands in logs and histories). */
function socketUrl() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  return `${scheme}://${location.host}/ws`;
}

/** The websocket subprotocols: "simulst", and the token as "bearer.<token>" when one was given (a browser's
 * websocket cannot send an Authorization header; the server accepts "simulst" and never echoes the token). */
function socketProtocols() {
  const token = $("token").value.trim();
  if (!token) return ["simulst"];
  if (!/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(token)) {
    throw new Error("the token has characters a websocket subprotocol cannot carry (use letters, digits, -._~+)");
  }
  return ["simulst", `bearer.${token}`];
}

// ------------------------------------------------------------------------------------------------ audio input
// An input delivers ArrayBuffers of 16-bit PCM at the server's rate: start(send, ended) begins, stop() ends it
// (delivering what it still holds first).

/** The microphone: getUserMedia → AudioContext → the pcm-worklet processor (mono, resampled, 100 ms blocks). */
async function openMicrophone(rate) {
  if (!navigator.mediaDevices?.getUserMedia) {
    throw new Error("this browser offers no microphone here (the page must be served over https or localhost)");
  }
  let media;
  try {
    media = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
  } catch (err) {
    throw new Error(`no microphone: ${err.name}: ${err.message}`);
  }
  if (!window.AudioContext || typeof AudioWorkletNode === "undefined") return recordMicrophone(media);
  const context = new AudioContext();
  let node;
  try {
    await context.audioWorklet.addModule("/static/pcm-worklet.js");
    node = new AudioWorkletNode(context, "pcm-worklet", {
      processorOptions: { targetRate: rate, blockMs: BLOCK_MS },
    });
    // The worklet's output is silent; routing it to the destination keeps the graph pulling it.
    const mute = new GainNode(context, { gain: 0 });
    context.createMediaStreamSource(media).connect(node).connect(mute).connect(context.destination);
    await context.resume();
  } catch (err) {
    media.getTracks().forEach((track) => track.stop());
    context.close();
    throw err;
  }

  let send = null; // blocks are dropped until the stream is ready
  let flushed = () => {};
  let stopping = null; // stop()'s promise (it runs once)
  node.port.onmessage = (event) => {
    if (event.data instanceof ArrayBuffer) {
      if (send) send(event.data);
    } else if (event.data.flushed) {
      flushed();
    }
  };
  return {
    start(sendBlock, ended) {
      send = sendBlock;
      media.getAudioTracks()[0].onended = ended; // (the device went away)
    },
    stop() {
      stopping ??= (async () => {
        if (send) {
          // the partial last block, then release the device
          await new Promise((resolve) => {
            flushed = resolve;
            node.port.postMessage("flush");
            setTimeout(resolve, 500);
          });
        }
        send = null;
        media.getTracks().forEach((track) => track.stop());
        await context.close();
      })();
      return stopping;
    },
  };
}

/** The microphone where AudioWorklet is unavailable: MediaRecorder's WebM / Opus, its bytes sent as they are
 * recorded (the start message then says "format": "webm"; the server decodes the container). */
function recordMicrophone(media) {
  const type = "audio/webm;codecs=opus";
  if (typeof MediaRecorder === "undefined" || !MediaRecorder.isTypeSupported(type)) {
    media.getTracks().forEach((track) => track.stop());
    throw new Error("this browser can neither run an AudioWorklet nor record WebM / Opus audio");
  }
  const recorder = new MediaRecorder(media, { mimeType: type });
  let send = null;
  let sent = Promise.resolve(); // the pieces go out in order (each is read asynchronously)
  let stopping = null;
  recorder.ondataavailable = (event) => {
    sent = sent.then(async () => {
      if (send && event.data.size) send(await event.data.arrayBuffer());
    });
  };
  return {
    format: "webm",
    start(sendBlock, ended) {
      send = sendBlock;
      media.getAudioTracks()[0].onended = ended;
      recorder.start(2 * BLOCK_MS); // a piece every 200 ms: the header first, then the audio
    },
    stop() {
      stopping ??= new Promise((resolve) => {
        const done = () => sent.then(() => media.getTracks().forEach((track) => track.stop())).then(resolve);
        if (recorder.state === "inactive") return done();
        recorder.onstop = done; // (after the last piece's dataavailable)
        recorder.stop();
      });
      return stopping;
    },
  };
}

/** A file: decoded, mixed to mono, resampled like the microphone, then sent block by block at real-time pace. */
async function openFile(file, rate) {
  if (!file) throw new Error("choose an audio file first");
  // decodeAudioData converts to its context's rate; 48 kHz is what a microphone usually gives too.
  const decoder = new OfflineAudioContext(1, 1, 48000);
  let decoded;
  try {
    decoded = await decoder.decodeAudioData(await file.arrayBuffer());
  } catch (err) {
    throw new Error(`cannot decode ${file.name}: ${err.message || err}`);
  }
  const channels = Array.from({ length: decoded.numberOfChannels }, (_, c) => decoded.getChannelData(c));
  const resampler = new Resampler(decoded.sampleRate, rate);
  const body = resampler.process(mixToMono(channels));
  const tail = resampler.flush();
  const samples = new Float32Array(body.length + tail.length);
  samples.set(body);
  samples.set(tail, body.length);
  const pcm = floatToInt16(samples);
  const block = Math.round((rate * BLOCK_MS) / 1000);

  let timer = null;
  const stop = async () => {
    clearInterval(timer);
    timer = null;
  };
  return {
    start(send, ended) {
      const began = performance.now();
      let sent = 0; // blocks sent
      // Block k is sent once it has been "spoken": (k + 1) * BLOCK_MS after the start, like a live speaker.
      timer = setInterval(() => {
        const due = Math.floor((performance.now() - began) / BLOCK_MS);
        while (sent < due && sent * block < pcm.length) {
          send(pcm.slice(sent * block, (sent + 1) * block).buffer);
          sent += 1;
        }
        if (sent * block >= pcm.length) {
          stop();
          ended();
        }
      }, 20);
    },
    stop,
  };
}

// ------------------------------------------------------------------------------------------------ the stream

/** One websocket stream: sends the start message and the input's audio, shows what comes back. */
class Stream {
  constructor(input, url, protocols, start) {
    this.input = input;
    this.state = "connecting"; // → streaming → finishing → finished, or error
    this.channels = [];
    this.replica = null;
    this.texts = { source: "", target: "" }; // committed text per channel
    this.finals = {}; // the final text per channel
    this.firstFrameAt = null; // performance.now() when the first audio frame was sent
    this.lags = [];
    this.endSent = false;
    this.ws = new WebSocket(url, protocols);
    this.ws.binaryType = "arraybuffer";
    this.ws.onopen = () => this.ws.send(JSON.stringify(start));
    this.ws.onmessage = (event) => this.receive(event.data);
    this.ws.onclose = (event) => this.closed(event);
  }

  get active() {
    return this.state === "connecting" || this.state === "streaming" || this.state === "finishing";
  }

  receive(data) {
    if (typeof data !== "string") return; // speech audio (not requested by this page)
    const message = JSON.parse(data);
    switch (message.type) {
      case "ready":
        this.channels = message.channels;
        this.replica = message.replica; // the server process (or cluster replica) serving this stream
        this.state = "streaming";
        setStatus("streaming", "streaming");
        showChannels(message.channels);
        $("stop").disabled = false;
        this.input.start((block) => this.sendAudio(block), () => this.finish());
        break;
      case "emission":
        this.texts[message.channel] += message.text;
        if (message.channel === shownChannel()) renderCaptions();
        if (message.text.trim()) this.measure(message);
        break;
      case "final":
        // "text" is the last channel's (the translation of a cascade), "source_text" the transcript
        this.finals[this.channels[this.channels.length - 1]] = message.text;
        if (this.channels.length > 1) this.finals.source = message.source_text;
        this.state = "finished";
        setStatus("finished", "finished");
        renderCaptions();
        break;
      case "error":
        this.state = "error";
        setStatus("error", "error");
        showError(message.message);
        break;
      default:
        break; // ("speech": its audio frame follows; not requested by this page)
    }
  }

  sendAudio(block) {
    if (this.endSent || this.ws.readyState !== WebSocket.OPEN) return;
    if (this.firstFrameAt === null) this.firstFrameAt = performance.now();
    this.ws.send(block);
  }

  /** The end of the source (Stop, or the file's end): the input's last audio, then the end message. */
  async finish() {
    if (this.state !== "streaming") return;
    this.state = "finishing";
    setStatus("finishing", "finishing…");
    $("stop").disabled = true;
    await this.input.stop();
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "end" }));
    this.endSent = true;
  }

  /** The latency of an emission: the client's clock since the first frame, less the audio it was made from. */
  measure(message) {
    if (this.firstFrameAt === null) return;
    const lag = performance.now() - this.firstFrameAt - message.source_ms;
    this.lags.push(lag);
    const mean = this.lags.reduce((a, b) => a + b, 0) / this.lags.length;
    $("latency").textContent =
      `lag ${Math.round(lag)} ms (server elapsed ${Math.round(message.elapsed_ms)} ms)` +
      ` · mean lag ${Math.round(mean)} ms over ${this.lags.length} emission${this.lags.length > 1 ? "s" : ""}`;
  }

  closed(event) {
    this.input.stop();
    if (this.active) {
      this.state = "error";
      setStatus("error", "error");
      const how = `code ${event.code}${event.reason ? `: ${event.reason}` : ""}`;
      // (a server process or cluster replica that dies closes its streams without a final: code 1006 or 1011)
      const replica = this.replica ? ` (${this.replica})` : "";
      showError(
        this.channels.length === 0
          ? `the connection closed before the stream started (${how})`
          : `the stream ended without its final: the connection closed (${how}); the server, or the replica ` +
              `serving this stream${replica}, went away`,
      );
    }
    setRunning(false);
  }
}

// ------------------------------------------------------------------------------------------------ the page

function setStatus(state, text) {
  $("status").dataset.state = state;
  $("status").textContent = text;
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = false;
}

/** Settings locked while a stream runs; Stop is enabled once the server is ready. */
function setRunning(running) {
  $("start").disabled = running || config === null;
  $("settings").querySelectorAll("fieldset").forEach((fieldset) => (fieldset.disabled = running));
  if (!running) $("stop").disabled = true;
}

function shownChannel() {
  return $("channel-target").checked ? "target" : "source";
}

/** Offer the stream's channels; a cascade shows its translation first. */
function showChannels(channels) {
  for (const name of ["source", "target"]) $(`channel-${name}`).disabled = !channels.includes(name);
  $(`channel-${channels[channels.length - 1]}`).checked = true;
}

function renderCaptions() {
  const channel = shownChannel();
  const captions = $("captions");
  captions.textContent = current ? current.texts[channel].trimStart() : "";
  captions.scrollTop = captions.scrollHeight;
  $("final").textContent = current?.finals[channel]?.trim() ?? "";
}

async function onStart() {
  if (current?.active || config === null) return;
  setRunning(true);
  $("error").hidden = true;
  $("latency").textContent = "—";
  setStatus("connecting", "connecting…");
  let input = null;
  try {
    const start = startMessage();
    const protocols = socketProtocols();
    input = $("source-file").checked
      ? await openFile($("file").files[0], config.sample_rate)
      : await openMicrophone(config.sample_rate);
    if (input.format) start.format = input.format; // (the MediaRecorder fallback sends WebM)
    current = new Stream(input, socketUrl(), protocols, start);
    renderCaptions();
  } catch (err) {
    if (input) input.stop();
    setStatus("error", "error");
    showError(err.message || String(err));
    setRunning(false);
  }
}

$("start").addEventListener("click", onStart);
$("settings").addEventListener("submit", (event) => event.preventDefault()); // (Enter in the token field)
$("stop").addEventListener("click", () => current?.finish());
$("task").addEventListener("change", updateTo);
$("file").addEventListener("change", () => ($("source-file").checked = true));
$("channel-source").addEventListener("change", renderCaptions);
$("channel-target").addEventListener("change", renderCaptions);
loadConfig();
