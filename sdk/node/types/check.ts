// Compiled by `npm run types` (tsc --noEmit), never run: uses the API as a TypeScript action
// would, so a .d.ts that drifts from what the README promises fails CI.
import millrace = require('../millrace.js');

interface Listing { id: string; rooms: number }
interface Config { minRooms: number }

millrace.map<Listing, Config>(async (payload, item) => {
  if (payload.rooms < item.config.minRooms) throw new millrace.Abstain('too small');
  const res = await fetch('http://127.0.0.1:1/score', { method: 'POST', body: JSON.stringify(payload), signal: item.signal });
  if (!res.ok) throw new millrace.Retryable(`scoring answered ${res.status}`);
  item.metric('rooms', payload.rooms, { city: 'x' });
  item.log.info('scored', { id: payload.id });
  const n: number = typeof item.state === 'number' ? item.state : 0;
  item.setState(n + 1);
  return { id: payload.id, score: (await res.json()) as unknown };
}, { config: { minRooms: { type: 'integer', default: 2 } }, window: 128 });

millrace.mapKeyed((payload: Listing, item) => [
  payload,
  millrace.output(payload, { key: Buffer.from([0xff]), outlet: 'other', headers: [['h', 'v']] }),
  millrace.output(item.id, { headers: { t: null } }),
], { concurrent: false });

millrace.batch(async (items) => items.map((it) => (it.attempt > 3 ? new Error('give up') : it.payload)), {
  size: 32, linger: 5, keyed: false, concurrent: true,
});

const k: string | Buffer | null = ({} as millrace.Item).key;
const w: number = millrace.WINDOW + millrace.CONCURRENT_WINDOW;
const d: string = millrace.workdir();
millrace.log.bind({ k, w, d }).warn('x');
// @ts-expect-error a handler's options are checked
millrace.map((p) => p, { window: '64' });
// @ts-expect-error a state is JSON
({} as millrace.Item).setState(() => 1);
