// esbuild bundles imported CSS into the page's one stylesheet.
declare module "*.css";
