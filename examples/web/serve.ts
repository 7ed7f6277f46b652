import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "esbuild";

/** The example page, served from its own origin. */
export interface ExampleServer {
  /** The page's address, such as `http://localhost:5173/`. */
  readonly url: string;
  /** The page's origin, as the browser sends it in `Origin`. */
  readonly origin: string;
  close(): Promise<void>;
}

/** Where the page is served when run directly; `EXAMPLE_PORT` changes it. */
const defaultPort = 5173;

/**
 * Bundles `client.ts` for the browser with esbuild (the generated messages
 * and connect-web included) and serves it with `index.html` on a port of its
 * own: another origin than the service, as a real web app would be.
 */
export async function serveExample(
  options: { port?: number; host?: string } = {},
): Promise<ExampleServer> {
  const [page, bundle] = await Promise.all([
    readFile(new URL("./index.html", import.meta.url)),
    build({
      entryPoints: [fileURLToPath(new URL("./client.ts", import.meta.url))],
      bundle: true,
      format: "esm",
      platform: "browser",
      target: "es2022",
      write: false,
      logLevel: "silent",
    }),
  ]);
  const files = new Map([
    ["/", { type: "text/html; charset=utf-8", body: page }],
    ["/index.html", { type: "text/html; charset=utf-8", body: page }],
    [
      "/client.js",
      { type: "text/javascript; charset=utf-8", body: bundle.outputFiles[0]?.contents ?? "" },
    ],
  ]);
  const server = createServer((request, response) => {
    const file = files.get(new URL(request.url ?? "/", "http://page").pathname);
    if (!file) {
      response.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    response.writeHead(200, { "content-type": file.type }).end(file.body);
  });
  const host = options.host ?? "localhost";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? defaultPort, host, resolve);
  });
  const origin = `http://${host}:${(server.address() as AddressInfo).port}`;
  return {
    url: `${origin}/`,
    origin,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const served = await serveExample({ port: Number(process.env.EXAMPLE_PORT) || defaultPort });
  console.log(`The example page: ${served.url} (the service must be running: npm start)`);
}
