import type { DescMethod, DescService } from "@bufbuild/protobuf";
import {
  createContextValues,
  createHandlerContext,
  type HandlerContext,
} from "@connectrpc/connect";
import { type Tenant, tenantKey } from "../services/context.js";

/**
 * The HandlerContext for a call that did not come through the Connect
 * router (grpc-js and REST), carrying the authenticated tenant the same way
 * the Connect interceptor does.
 */
export function callContext(init: {
  service: DescService;
  method: DescMethod;
  protocolName: "grpc" | "rest";
  requestMethod: string;
  url: string;
  tenant: Tenant | undefined;
  signal?: AbortSignal;
}): HandlerContext {
  const contextValues = createContextValues();
  if (init.tenant) contextValues.set(tenantKey, init.tenant);
  return createHandlerContext({
    service: init.service,
    method: init.method,
    protocolName: init.protocolName,
    requestMethod: init.requestMethod,
    url: init.url,
    requestSignal: init.signal,
    contextValues,
  });
}
