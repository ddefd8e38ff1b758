// Audio capture for simulst's web page.
//
// This file is both
//   * an AudioWorklet module: the "pcm-worklet" processor mixes its input to mono, resamples it from the audio
//     context's rate to the server's and posts blocks (~100 ms) of 16-bit PCM to the main thread as ArrayBuffers;
//   * an ES module of the page, which imports Resampler and floatToInt16 to convert a decoded audio file the same
//     way.
// The processor is only defined where AudioWorkletProcessor exists (inside the audio worklet).

/**
 * A streaming fractional-ratio resampler: windowed-sinc interpolation whose kernel is also the anti-aliasing
 * low-pass filter (cut off a little below the lower of the two Nyquist frequencies). It keeps the input's tail
 * and the fractional read position between calls, so a stream cut into blocks of any size resamples exactly as
 * the whole stream would.
 */
export class Resampler {
  /**
   * @param {number} inRate input sample rate (Hz)
   * @param {number} outRate output sample rate (Hz)
   * @param {number} zeroCrossings kernel half-width, in zero crossings of the sinc (quality vs. cost)
   */
  constructor(inRate, outRate, zeroCrossings = 12) {
    this.passthrough = inRate === outRate;
    this.step = inRate / outRate; // input samples per output sample
    // cut-off in cycles per input sample: 90% of the lower Nyquist frequency leaves room for the transition band
    this.cutoff = 0.5 * Math.min(1, outRate / inRate) * 0.9;
    this.halfWidth = zeroCrossings / (2 * this.cutoff); // kernel half-width, in input samples
    this.pad = Math.ceil(this.halfWidth);
    // Input history, starting with `pad` zeros so that output sample 0 lines up with input sample 0.
    this.buffer = new Float32Array(this.pad);
    this.position = this.pad; // where the next output sample lies, in input samples from buffer[0]
    this.samplesIn = 0;
    this.samplesOut = 0;
  }

  /** The kernel's value `x` input samples away from the output instant (before normalisation). */
  kernel(x) {
    const u = x / this.halfWidth;
    if (u <= -1 || u >= 1) return 0;
    const a = 2 * this.cutoff * x;
    const sinc = a === 0 ? 1 : Math.sin(Math.PI * a) / (Math.PI * a);
    const blackman = 0.42 + 0.5 * Math.cos(Math.PI * u) + 0.08 * Math.cos(2 * Math.PI * u);
    return sinc * blackman;
  }

  /** Resample one block of mono float samples; returns the output samples now available. */
  process(input) {
    this.samplesIn += input.length;
    if (this.passthrough) {
      this.samplesOut += input.length;
      return Float32Array.from(input);
    }
    const buffer = new Float32Array(this.buffer.length + input.length);
    buffer.set(this.buffer);
    buffer.set(input, this.buffer.length);

    const out = new Float32Array(Math.ceil((buffer.length - this.position) / this.step) + 1);
    let n = 0;
    let t = this.position;
    // An output sample needs the input up to `halfWidth` samples after it.
    while (Math.floor(t) + this.pad < buffer.length) {
      const first = Math.max(0, Math.ceil(t - this.halfWidth));
      const last = Math.min(buffer.length - 1, Math.floor(t + this.halfWidth));
      let sum = 0;
      let weights = 0;
      for (let k = first; k <= last; k++) {
        const w = this.kernel(t - k);
        sum += w * buffer[k];
        weights += w;
      }
      out[n++] = weights > 0 ? sum / weights : 0; // normalised: unit gain at DC whatever the phase
      t += this.step;
    }
    // Keep only the history the next output samples still need.
    const keep = Math.max(0, Math.floor(t) - this.pad);
    this.buffer = buffer.slice(keep);
    this.position = t - keep;
    this.samplesOut += n;
    return out.subarray(0, n);
  }

  /** The last output samples, once the input has ended (the input is padded with silence). */
  flush() {
    if (this.passthrough) return new Float32Array(0);
    const total = Math.ceil(this.samplesIn / this.step); // output samples the whole input makes
    const before = this.samplesOut;
    const tail = this.process(new Float32Array(2 * this.pad + 2)); // enough silence to reach the last one
    const wanted = Math.max(0, Math.min(tail.length, total - before));
    this.samplesOut = before + wanted;
    return tail.subarray(0, wanted);
  }
}

/** Float samples in [-1, 1] as 16-bit PCM (clipped). */
export function floatToInt16(samples) {
  const pcm = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    pcm[i] = Math.round(s < 0 ? s * 32768 : s * 32767);
  }
  return pcm;
}

/** The average of the channels (one Float32Array each) as one mono Float32Array. */
export function mixToMono(channels) {
  if (channels.length === 1) return channels[0];
  const mono = new Float32Array(channels[0].length);
  for (const channel of channels) {
    for (let i = 0; i < mono.length; i++) mono[i] += channel[i];
  }
  for (let i = 0; i < mono.length; i++) mono[i] /= channels.length;
  return mono;
}

if (typeof AudioWorkletProcessor !== "undefined") {
  /**
   * Microphone audio → blocks of 16-bit PCM at `processorOptions.targetRate`, `processorOptions.blockMs` long,
   * posted (transferred) to the main thread. The message "flush" posts the partial block, then {flushed: true}.
   */
  class PcmProcessor extends AudioWorkletProcessor {
    constructor(options) {
      super();
      const { targetRate, blockMs = 100 } = options.processorOptions;
      // `sampleRate` is the audio context's rate (a global of the worklet scope)
      this.resampler = new Resampler(sampleRate, targetRate);
      this.block = new Int16Array(Math.round((targetRate * blockMs) / 1000));
      this.filled = 0;
      this.port.onmessage = (event) => {
        if (event.data === "flush") {
          this.post();
          this.port.postMessage({ flushed: true });
        }
      };
    }

    process(inputs) {
      const channels = inputs[0];
      if (channels && channels.length > 0) {
        const samples = floatToInt16(this.resampler.process(mixToMono(channels)));
        for (let i = 0; i < samples.length; i++) {
          this.block[this.filled++] = samples[i];
          if (this.filled === this.block.length) this.post();
        }
      }
      return true; // keep processing while the node lives
    }

    /** Post the samples gathered so far (if any). */
    post() {
      if (this.filled === 0) return;
      const data = this.block.slice(0, this.filled).buffer;
      this.port.postMessage(data, [data]);
      this.filled = 0;
    }
  }

  registerProcessor("pcm-worklet", PcmProcessor);
}
