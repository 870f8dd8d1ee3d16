import { IncomingMessage, type Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { createHttpServer } from '../src/http/http-server.ts';

function exampleApp() {
  const app = express();
  app.post('/echo/:name', express.json(), (req, res) => {
    res.status(201).json({ name: req.params.name, path: req.path, body: req.body, host: req.get('host'), sameApp: req.app === app });
  });
  return app;
}

/** Counts the calls of Object.setPrototypeOf that change a server request's or response's prototype while `work` runs. */
async function prototypeChanges(work: () => Promise<void>): Promise<number> {
  const original = Object.setPrototypeOf;
  let changes = 0;
  Object.setPrototypeOf = (target: object, proto: object | null) => {
    const served = target instanceof IncomingMessage || target instanceof ServerResponse;
    if (served && Object.getPrototypeOf(target) !== proto) changes += 1;
    return original(target, proto);
  };
  try {
    await work();
  } finally {
    Object.setPrototypeOf = original;
  }
  return changes;
}

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => new Promise((closed) => server.close(closed))));
});

async function post(server: Server): Promise<Response> {
  servers.push(server);
  if (!server.listening) await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  const { port } = server.address() as AddressInfo;
  return fetch(`http://127.0.0.1:${port}/echo/ada`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ n: 1 }),
  });
}

describe('createHttpServer', () => {
  it('serves an Express app without changing any request or response prototype', async () => {
    const server = createHttpServer(exampleApp());
    let answer: Response | undefined;
    const changes = await prototypeChanges(async () => {
      answer = await post(server);
    });
    expect(changes).toBe(0);
    expect(answer?.status).toBe(201);
    expect(await answer?.json()).toEqual({
      name: 'ada',
      path: '/echo/ada',
      body: { n: 1 },
      host: expect.stringMatching(/^127\.0\.0\.1:\d+$/),
      sameApp: true,
    });
  });

  it('is what Express alone does not: app.listen changes both prototypes on every request', async () => {
    const app = exampleApp();
    const server = app.listen(0, '127.0.0.1');
    await new Promise((listening) => server.once('listening', listening));
    const changes = await prototypeChanges(async () => {
      expect((await post(server)).status).toBe(201);
    });
    expect(changes).toBe(2);
  });
});
